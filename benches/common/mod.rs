//! The dataset shape the benches and `examples/service_bench.rs` share:
//! 32 features in [0, 1], a 0/1 label, a measure and two dimensions.

pub const FEATURES: usize = 32;

/// The create-dataset request of that shape, named `name`.
pub fn request(name: &str) -> serde_json::Value {
    serde_json::json!({
        "name": name, "privacy_unit": "label",
        "features": (0..FEATURES)
            .map(|j| serde_json::json!({"name": format!("f{j}"), "min": 0, "max": 1}))
            .collect::<Vec<_>>(),
        "label": "converted",
        "measures": [{"name": "value", "min": 0, "max": 100}],
        "dimensions": [
            {"name": "campaign", "values": ["c0", "c1", "c2", "c3"]},
            {"name": "device", "values": ["d0", "d1", "d2"]}
        ],
        "budget": {"epsilon": 1, "delta": 1e-6}
    })
}
