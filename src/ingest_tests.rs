use super::*;
use dpgate_api_types as api;

/// The schema the ingest tests upload into (the parallel tests too).
pub(super) fn schema() -> Schema {
    Schema::parse(
        &serde_json::from_value::<api::CreateDataset>(serde_json::json!({
            "name": "ads", "privacy_unit": "label",
            "features": [{"name": "f0", "min": 0, "max": 1}, {"name": "f1", "min": -5, "max": 5}],
            "label": "converted",
            "measures": [{"name": "value", "min": 0, "max": 100}],
            "dimensions": [{"name": "campaign", "values": ["a", "b"]}],
            "budget": {"epsilon": 10, "delta": 1e-6}
        }))
        .unwrap(),
    )
    .unwrap()
}

fn run(format: Format, text: &str) -> (Summary, Vec<RowRecord>) {
    let mut rows = Vec::new();
    let summary = parse(format, text.as_bytes(), &schema(), |batch| {
        rows.extend(batch);
        true
    })
    .unwrap();
    (summary, rows)
}

const HEADER: &str = "row_id,converted,f0,f1,value,campaign\n";

#[test]
fn a_valid_csv_is_scaled_encoded_and_summed() {
    let text = format!("{HEADER}r1,1,0.5,5,250,a\nr2,0,1,-5,-3,b\n");
    let (summary, rows) = run(Format::Csv, &text);
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.rows, 2);
    assert_eq!(rows[0].row_id, "r1");
    assert_eq!(rows[0].line, 2);
    assert_eq!(
        rows[0].features,
        [0.5f32.to_le_bytes(), 1.0f32.to_le_bytes()].concat()
    );
    // Measures are clamped to their bounds, not refused.
    assert_eq!(rows[0].measures, 100.0f64.to_le_bytes());
    assert_eq!(rows[1].measures, 0.0f64.to_le_bytes());
    assert_eq!(rows[1].dimensions, 1u32.to_le_bytes());
    let stats = summary.stats.unwrap();
    assert_eq!(stats.label_count, 1);
    assert_eq!(stats.label_feature_units, vec![1 << 39, 1 << 40]);
    assert_eq!(stats.max_norm_squared, 1.25);
}

#[test]
fn columns_may_come_in_any_order() {
    let text = "campaign,value,f1,f0,converted,row_id\nb,1,0,0,1,x\n";
    let (summary, rows) = run(Format::Csv, text);
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(
        rows[0].features,
        [0.0f32.to_le_bytes(), 0.5f32.to_le_bytes()].concat()
    );
}

#[test]
fn every_kind_of_bad_line_is_reported_with_its_line_number() {
    let cases = [
        ("r1,1,0.5,0,1,a,extra\n", "7 fields, expected 6"),
        ("r1,1,0.5,0\n", "4 fields"),
        ("r1,1,NaN,0,1,a\n", "not finite"),
        ("r1,1,inf,0,1,a\n", "not finite"),
        ("r1,1,x,0,1,a\n", "not a number"),
        ("r1,1,1.5,0,1,a\n", "outside its declared bounds"),
        ("r1,2,0.5,0,1,a\n", "not 0 or 1"),
        ("r1,yes,0.5,0,1,a\n", "not 0 or 1"),
        ("r1,1,0.5,0,1,c\n", "not a declared value"),
        (",1,0.5,0,1,a\n", "row_id must be"),
    ];
    for (line, reason) in cases {
        let text = format!("{HEADER}ok,0,0,0,0,a\n{line}");
        let (summary, _) = run(Format::Csv, &text);
        assert_eq!(summary.errors.len(), 1, "{line:?}: {:?}", summary.errors);
        assert_eq!(summary.errors[0].line, 3, "{line:?}");
        assert!(
            summary.errors[0].reason.contains(reason),
            "{:?}",
            summary.errors[0]
        );
        assert!(summary.stats.is_none());
    }
}

#[test]
fn duplicate_row_ids_in_one_upload_are_refused() {
    let text = format!("{HEADER}r1,1,0,0,0,a\nr2,1,0,0,0,a\nr1,0,0,0,0,b\n");
    let (summary, _) = run(Format::Csv, &text);
    assert_eq!(
        summary.errors,
        vec![LineError {
            line: 4,
            reason: "row_id repeats the row_id of line 2".to_owned(),
            file: None,
        }]
    );
}

#[test]
fn unknown_or_missing_header_columns_refuse_the_whole_upload() {
    for header in [
        "row_id,converted,f0,f1,value,campaign,extra\n",
        "row_id,converted,f0,value,campaign\n",
        "row_id,converted,f0,f0,value,campaign\n",
    ] {
        let (summary, rows) = run(Format::Csv, &format!("{header}r1,1,0,0,0,a\n"));
        assert_eq!(summary.errors.len(), 1);
        assert_eq!(summary.errors[0].line, 1);
        assert!(rows.is_empty());
    }
}

#[test]
fn a_header_names_its_unknown_missing_and_repeated_columns() {
    let cases = [
        (
            "row_id,converted,f0,f0,f1,value,campaign\n",
            r#"header: columns named more than once ["f0"]"#,
        ),
        (
            "row_id,converted,f0,f1,value,campaign,campaign,row_id,campaign\n",
            r#"header: columns named more than once ["campaign", "row_id"]"#,
        ),
        (
            "row_id,converted,f0,f0,value,campaign,extra,extra\n",
            r#"header: unknown columns ["extra"]; missing columns ["f1"]; columns named more than once ["f0"]"#,
        ),
        (
            "campaign,f1,converted\n",
            r#"header: missing columns ["row_id", "f0", "value"]"#,
        ),
    ];
    for (header, reason) in cases {
        let (summary, rows) = run(Format::Csv, &format!("{header}r1,1,0,0,0,a\n"));
        assert_eq!(
            summary.errors,
            vec![LineError {
                line: 1,
                reason: reason.to_owned(),
                file: None,
            }]
        );
        assert!(rows.is_empty());
    }
}

#[test]
fn at_most_twenty_errors_are_reported_and_nothing_is_handed_on_after_the_first() {
    let mut text = HEADER.to_owned();
    for index in 0..100 {
        text.push_str(&format!(
            "r{index},1,{},0,0,a\n",
            if index % 2 == 0 { "0.5" } else { "9" }
        ));
    }
    let (summary, rows) = run(Format::Csv, &text);
    assert_eq!(summary.errors.len(), MAX_REPORTED_ERRORS);
    assert_eq!(summary.errors[0].line, 3);
    assert!(rows.is_empty(), "the first batch is only flushed when full");
}

#[test]
fn ndjson_rows_are_validated_like_csv_rows() {
    let text = concat!(
        r#"{"row_id": "r1", "converted": 1, "f0": 0.5, "f1": 5, "value": 7, "campaign": "a"}"#,
        "\n\n",
        r#"{"row_id": "r2", "converted": 0, "f0": 0, "f1": -5e0, "value": 7, "campaign": "b"}"#,
        "\n",
        r#"{"row_id": "r3", "converted": 1, "f0": "0.5", "f1": 0, "value": 7, "campaign": "a"}"#,
        "\n",
        r#"{"row_id": "r4", "converted": 1, "f0": 0.5, "f1": 0, "value": 7, "campaign": "a", "x": 1}"#,
        "\n",
        r#"{"row_id": "r5", "converted": 1, "f0": 0.5, "f1": 0, "campaign": "a"}"#,
        "\n",
        "[1, 2]\n",
    );
    let (summary, _) = run(Format::Ndjson, text);
    let lines: Vec<(u64, &str)> = summary
        .errors
        .iter()
        .map(|error| (error.line, error.reason.as_str()))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(
        lines[0],
        (4, "f0 = \"0.5\" is not a number (a JSON number)")
    );
    assert_eq!(lines[1], (5, "unknown column \"x\""));
    assert_eq!(lines[2], (6, "column \"value\" is missing"));
    assert_eq!(lines[3].0, 7);
    assert!(
        lines[3]
            .1
            .starts_with("not a JSON object: invalid type: sequence, expected a JSON object"),
        "{lines:?}"
    );
    assert_eq!(summary.rows, 2);
}

#[test]
fn large_uploads_are_handed_on_in_batches() {
    let mut text = HEADER.to_owned();
    for index in 0..(2 * BATCH_ROWS + 7) {
        text.push_str(&format!("r{index},{},0.25,1,5,b\n", index % 2));
    }
    let mut batches = Vec::new();
    let summary = parse(Format::Csv, text.as_bytes(), &schema(), |batch| {
        batches.push(batch.len());
        true
    })
    .unwrap();
    assert_eq!(batches, vec![BATCH_ROWS, BATCH_ROWS, 7]);
    assert_eq!(summary.rows, (2 * BATCH_ROWS + 7) as u64);
    assert_eq!(summary.stats.unwrap().label_count, (BATCH_ROWS + 3) as u64);
}

#[test]
fn a_sink_that_stops_ends_the_upload() {
    let mut text = HEADER.to_owned();
    for index in 0..(3 * BATCH_ROWS) {
        text.push_str(&format!("r{index},1,0,0,0,a\n"));
    }
    let mut calls = 0;
    let summary = parse(Format::Csv, text.as_bytes(), &schema(), |_| {
        calls += 1;
        false
    })
    .unwrap();
    assert_eq!(calls, 1);
    assert_eq!(summary.rows, BATCH_ROWS as u64);
}

/// An NDJSON line of the example schema.
fn json_row(id: &str, label: &str, f0: &str) -> String {
    format!(
        r#"{{"row_id": "{id}", "converted": {label}, "f0": {f0}, "f1": 0, "value": 1, "campaign": "a"}}"#
    )
}

/// Every error as (line, reason).
fn errors(summary: &Summary) -> Vec<(u64, &str)> {
    summary
        .errors
        .iter()
        .map(|error| (error.line, error.reason.as_str()))
        .collect()
}

#[test]
fn the_line_limit_follows_the_schema() {
    // row_id: (6·6 + 2) + (6·256 + 2) + 16 = 1592; converted: 6·9 + 2 + 350
    // + 16 = 422; f0, f1: 14 + 350 + 16 = 380 each; value: 32 + 350 + 16 =
    // 398; campaign: 50 + (6·1 + 2) + 16 = 74; the line: 4. Row 3250;
    // limit 2·3250 + 4096.
    assert_eq!(max_line_len(&schema()), 10596);
    let mut wide = schema();
    wide.dimensions[0].values.push("c".repeat(1000));
    assert_eq!(max_line_len(&wide), 10596 + 2 * 6 * 999);
}

#[test]
fn the_longest_legitimate_row_fits_well_within_the_limit() {
    // Every key and text value spelled with \u escapes, numbers padded.
    let escaped =
        |text: &str| -> String { text.bytes().map(|byte| format!("\\u{byte:04x}")).collect() };
    let padded = |number: &str| format!("{number:0<width$}", width = MAX_NUMBER_TEXT);
    let line = format!(
        "{{ \"{}\": \"{}\", \"{}\": 1, \"{}\": {}, \"{}\": {}, \"{}\": {}, \"{}\": \"{}\" }}\r\n",
        escaped("row_id"),
        escaped(&"r".repeat(MAX_ROW_ID_LEN)),
        escaped("converted"),
        escaped("f0"),
        padded("0.5"),
        escaped("f1"),
        padded("-4.5"),
        escaped("value"),
        padded("7.0"),
        escaped("campaign"),
        escaped("b"),
    );
    assert!(line.len() < max_line_len(&schema()) / 2, "{}", line.len());
    let (summary, rows) = run(Format::Ndjson, &line);
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(rows[0].row_id, "r".repeat(MAX_ROW_ID_LEN));
    assert_eq!(rows[0].dimensions, 1u32.to_le_bytes());
}

#[test]
fn a_line_of_exactly_the_limit_is_read_and_one_byte_more_ends_the_upload() {
    let limit = max_line_len(&schema());
    // Spaces pad a row to `limit` bytes, its `\n` included.
    let ndjson = |id: &str, length: usize| {
        let row = json_row(id, "1", "0.5");
        format!("{row}{}\n", " ".repeat(length - row.len() - 1))
    };
    let text = [
        ndjson("r1", limit),
        json_row("r2", "true", "0.5") + "\n",
        ndjson("r3", limit + 1),
        json_row("r4", "true", "0.5") + "\n",
    ]
    .concat();
    let (summary, rows) = run(Format::Ndjson, &text);
    let too_long =
        format!("line 3 is longer than {limit} bytes, more than a row of this schema can need");
    assert_eq!(
        errors(&summary),
        [
            (2, "label converted = true is not the JSON number 0 or 1"),
            (3, too_long.as_str()),
        ]
    );
    assert!(rows.is_empty());
    assert!(summary.stats.is_none());

    // The same for CSV, where the header is a record too and spaces pad a
    // number.
    let csv = |id: &str, length: usize| {
        let row = format!("{id},1,0.5,0,1,a\n");
        format!("{id},1,0.5{},0,1,a\n", " ".repeat(length - row.len()))
    };
    let text = [
        HEADER.to_owned(),
        csv("r1", limit),
        "r2,2,0,0,0,a\n".to_owned(),
        csv("r3", limit + 1),
        "r4,2,0,0,0,a\n".to_owned(),
    ]
    .concat();
    let (summary, rows) = run(Format::Csv, &text);
    let too_long =
        format!("line 4 is longer than {limit} bytes, more than a row of this schema can need");
    assert_eq!(
        errors(&summary),
        [
            (3, "label converted = \"2\" is not 0 or 1"),
            (4, too_long.as_str()),
        ]
    );
    assert!(rows.is_empty());
}

/// `prefix`, then `fill` without end; panics once more than `most` bytes
/// have been read in all.
struct Endless {
    prefix: Vec<u8>,
    fill: u8,
    read: usize,
    most: usize,
}

impl Read for Endless {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        for byte in buffer.iter_mut() {
            *byte = self.prefix.get(self.read).copied().unwrap_or(self.fill);
            self.read += 1;
        }
        assert!(
            self.read <= self.most,
            "read {} bytes, more than {}",
            self.read,
            self.most
        );
        Ok(buffer.len())
    }
}

/// Parses `prefix` and then an endless line, which must be refused as line
/// `line` having read at most `slack` bytes past the limit beyond `prefix`.
fn endless(format: Format, prefix: String, fill: u8, line: u64, slack: usize) {
    let limit = max_line_len(&schema());
    let mut reader = Endless {
        most: prefix.len() + limit + slack,
        prefix: prefix.into_bytes(),
        fill,
        read: 0,
    };
    let mut batches = Vec::new();
    let summary = parse(format, &mut reader, &schema(), |batch| {
        batches.push(batch.len());
        true
    })
    .unwrap();
    assert_eq!(
        summary.errors,
        [LineError {
            line,
            reason: format!(
                "line {line} is longer than {limit} bytes, more than a row of this schema can need"
            ),
            file: None,
        }],
        "{format:?}"
    );
    assert!(summary.stats.is_none());
    // The full batch before the line went on; the row after it did not.
    let rows = usize::try_from(summary.rows).unwrap();
    assert_eq!(batches, vec![BATCH_ROWS; rows / BATCH_ROWS], "{format:?}");
    assert!(reader.read <= reader.most);
}

#[test]
fn an_endless_line_is_refused_after_reading_little_more_than_the_limit() {
    let rows = BATCH_ROWS + 1;
    let ndjson: String = (0..rows)
        .map(|index| json_row(&format!("r{index}"), "1", "0.5") + "\n")
        .collect();
    // The line reader reads at most one byte past the limit, and its buffer
    // may hold one more buffer's worth.
    let slack = 1 + READ_BUFFER;
    endless(Format::Ndjson, ndjson.clone(), b' ', rows as u64 + 1, slack);
    endless(
        Format::Ndjson,
        ndjson + r#"{"row_id": ""#,
        b'x',
        rows as u64 + 1,
        slack,
    );

    let csv: String = (0..rows)
        .map(|index| format!("r{index},1,0.5,0,1,a\n"))
        .collect();
    // The CSV reader reads one record and a buffer more before the record
    // starts, and at most the limit and a buffer after.
    let slack = 2 * READ_BUFFER;
    endless(
        Format::Csv,
        format!("{HEADER}{csv}r,1,"),
        b'7',
        rows as u64 + 2,
        slack,
    );
    // A quoted field may span lines: the record still counts as one.
    endless(
        Format::Csv,
        format!("{HEADER}{csv}\"r"),
        b'\n',
        rows as u64 + 2,
        slack,
    );
    // The header is a record too.
    endless(Format::Csv, "row_id,".to_owned(), b'f', 1, slack);
}

#[test]
fn ndjson_that_is_not_utf8_is_a_bad_line_like_csv() {
    let mut text = (json_row("r1", "1", "0.5") + "\n").into_bytes();
    text.extend_from_slice(b"{\"row_id\": \"r\xff\"}\n");
    text.extend_from_slice((json_row("r3", "1", "0.5") + "\n").as_bytes());
    text.extend_from_slice(b"\xc3");
    let mut rows = Vec::new();
    let summary = parse(Format::Ndjson, text.as_slice(), &schema(), |batch| {
        rows.extend(batch);
        true
    })
    .unwrap();
    assert_eq!(
        errors(&summary),
        [
            (
                2,
                "not valid UTF-8: invalid utf-8 sequence of 1 bytes from index 13"
            ),
            (
                4,
                "not valid UTF-8: incomplete utf-8 byte sequence from index 0"
            ),
        ]
    );
    assert_eq!(summary.rows, 2);
    assert!(rows.is_empty());

    let mut text = HEADER.as_bytes().to_vec();
    text.extend_from_slice(b"r1,1,0.5,0,1,a\nr\xff,1,0.5,0,1,a\n");
    let summary = parse(Format::Csv, text.as_slice(), &schema(), |_| true).unwrap();
    assert_eq!(summary.errors.len(), 1);
    assert_eq!(summary.errors[0].line, 3);
    assert!(summary.errors[0].reason.starts_with("not valid UTF-8: "));
}

#[test]
fn an_ndjson_object_naming_a_column_twice_is_refused() {
    let line = |row: &str, duplicate: &str| row.replacen('{', &format!("{{{duplicate}, "), 1);
    let row = json_row("r1", "1", "0.5");
    let text = [
        line(&row, r#""f0": 0.25"#),
        line(&row, r#""f\u0030": 0.5"#),
        line(&row, r#""row_id": "r1""#),
        line(&row, r#""x": 1, "x": 2"#),
        json_row("r5", "1", "0.5"),
    ]
    .join("\n");
    let (summary, rows) = run(Format::Ndjson, &text);
    assert_eq!(
        errors(&summary),
        [
            (1, "column \"f0\" appears twice in the object"),
            (2, "column \"f0\" appears twice in the object"),
            (3, "column \"row_id\" appears twice in the object"),
            (4, "unknown column \"x\""),
        ]
    );
    assert_eq!(summary.rows, 1);
    assert!(rows.is_empty());
}

#[test]
fn ndjson_values_must_have_their_columns_json_types() {
    let cases = [
        (
            r#""converted": true"#,
            "label converted = true is not the JSON number 0 or 1",
        ),
        (
            r#""converted": "1""#,
            "label converted = \"1\" is not the JSON number 0 or 1",
        ),
        (
            r#""converted": 1.0"#,
            "label converted = 1.0 is not the JSON number 0 or 1",
        ),
        (
            r#""converted": 1e0"#,
            "label converted = 1.0 is not the JSON number 0 or 1",
        ),
        (
            r#""converted": -0"#,
            "label converted = -0.0 is not the JSON number 0 or 1",
        ),
        (
            r#""converted": 2"#,
            "label converted = 2 is not the JSON number 0 or 1",
        ),
        (
            r#""converted": null"#,
            "label converted = null is not the JSON number 0 or 1",
        ),
        (r#""row_id": 7"#, "row_id = 7 is not a JSON string"),
        (
            r#""row_id": ["r"]"#,
            "row_id = [\"r\"] is not a JSON string",
        ),
        (r#""campaign": 1"#, "campaign = 1 is not a JSON string"),
        (
            r#""campaign": null"#,
            "campaign = null is not a JSON string",
        ),
        (
            r#""f0": "0.5""#,
            "f0 = \"0.5\" is not a number (a JSON number)",
        ),
        (
            r#""f1": false"#,
            "f1 = false is not a number (a JSON number)",
        ),
        (
            r#""value": {}"#,
            "value = {} is not a number (a JSON number)",
        ),
    ];
    let base =
        r#"{"row_id": "r1", "converted": 1, "f0": 0.5, "f1": 0, "value": 1, "campaign": "a"}"#;
    for (field, reason) in cases {
        let key = &field[..field.find(':').unwrap()];
        let start = base.find(key).unwrap();
        let end = start + base[start..].find([',', '}']).unwrap();
        let line = format!("{}{field}{}", &base[..start], &base[end..]);
        let (summary, rows) = run(
            Format::Ndjson,
            &format!("{base}\n{}\n", line.replace("r1", "r2")),
        );
        assert_eq!(errors(&summary), [(2, reason)], "{line}");
        assert!(rows.is_empty());
    }
    // What they do accept: integers 0 and 1, any JSON number for numbers.
    let text = [
        json_row("r1", "0", "5e-1"),
        json_row("r2", "1", "1"),
        json_row("r3", "0", "0.0"),
    ]
    .join("\n");
    let (summary, rows) = run(Format::Ndjson, &text);
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(
        rows.iter().map(|row| row.label).collect::<Vec<_>>(),
        [0, 1, 0]
    );
    // CSV is as strict about the label.
    for label in ["1.0", "true", "01", "-0"] {
        let (summary, _) = run(Format::Csv, &format!("{HEADER}r1,{label},0,0,0,a\n"));
        let reason = format!("label converted = {label:?} is not 0 or 1");
        assert_eq!(errors(&summary), [(2, reason.as_str())]);
    }
}

#[test]
fn features_are_stored_finite_and_within_zero_and_one_even_for_extreme_bounds() {
    let mut wide = schema();
    wide.features[0].min = -f64::MAX;
    wide.features[0].max = f64::MAX;
    wide.features[1].min = 0.0;
    wide.features[1].max = 5e-324;
    let text = format!(
        "{HEADER}r1,1,{},0,0,a\nr2,1,0,5e-324,0,a\nr3,1,{},0,0,a\n",
        -f64::MAX,
        f64::MAX
    );
    let mut rows = Vec::new();
    let summary = parse(Format::Csv, text.as_bytes(), &wide, |batch| {
        rows.extend(batch);
        true
    })
    .unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    let features: Vec<f32> = rows
        .iter()
        .flat_map(|row| row.features.chunks(4))
        .map(|bytes| f32::from_le_bytes(bytes.try_into().unwrap()))
        .collect();
    assert_eq!(features, [0.0, 0.0, 0.5, 1.0, 1.0, 0.0]);
    let stats = summary.stats.unwrap();
    assert_eq!(stats.label_feature_units, [3 << 39, 1 << 40]);
    assert_eq!(stats.max_norm_squared, 1.25);
}

proptest::proptest! {
    #[test]
    fn scaled_features_are_finite_and_within_zero_and_one(
        a in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO,
        b in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO,
        t in 0.0..=1.0f64,
    ) {
        proptest::prop_assume!(a != b);
        let (min, max) = if a < b { (a, b) } else { (b, a) };
        let value = (min + t * (max - min)).clamp(min, max);
        let value = if value.is_finite() { value } else { min / 2.0 + max / 2.0 };
        let scaled = scale(value, min, max).unwrap();
        proptest::prop_assert!(scaled.is_finite() && (0.0..=1.0).contains(&scaled), "{scaled}");
        proptest::prop_assert_eq!(scale(min, min, max), Some(0.0));
        proptest::prop_assert_eq!(scale(max, min, max), Some(1.0));
    }

    /// A whole column scaled at once is bit-identical to each value scaled
    /// alone, and refused (for the value-by-value path to name the value)
    /// as soon as one value is out of bounds or not finite.
    #[test]
    fn a_column_scaled_at_once_is_each_value_scaled(
        a in -1e300..1e300f64,
        b in -1e300..1e300f64,
        ts in proptest::collection::vec(0.0..=1.0f64, 0..40),
        bad in proptest::option::of((0usize..40, proptest::sample::select(vec![f64::NAN, f64::INFINITY, -1.0, 2.0]))),
    ) {
        proptest::prop_assume!(a != b);
        let (min, max) = if a < b { (a, b) } else { (b, a) };
        let mut values: Vec<f64> =
            ts.iter().map(|t| (min + t * (max - min)).clamp(min, max)).collect();
        let each: Vec<f32> = values.iter().map(|&v| scale(v, min, max).unwrap()).collect();
        match scale_all(&values, min, max) {
            Some(all) => proptest::prop_assert!(
                all.iter().map(|v| v.to_bits()).eq(each.iter().map(|v| v.to_bits()))
            ),
            // Only a span that overflows is left to the other path.
            None => proptest::prop_assert!(!(max - min).is_finite()),
        }
        if let Some((at, outside)) = bad && !values.is_empty() {
            let at = at % values.len();
            // Outside: below min or above max by the span, or not finite.
            values[at] = match outside {
                -1.0 => min - (max - min).min(f64::MAX),
                2.0 => max + (max - min).min(f64::MAX),
                other => other,
            };
            if !(min..=max).contains(&values[at]) {
                proptest::prop_assert_eq!(scale_all(&values, min, max), None);
            }
        }
    }
}

/// A registered file's typed columns are encoded as an upload of the same
/// values stores them, whichever Arrow types hold them, and a value an
/// upload would refuse is refused with its row.
#[test]
fn typed_columns_are_stored_as_the_same_rows_uploaded() {
    use std::sync::Arc;

    use arrow_array::{
        Array, ArrayRef, BooleanArray, Float32Array, Float64Array, Int64Array, LargeStringArray,
        RecordBatch, StringArray, UInt8Array, UInt32Array,
    };

    let typed = |f1: Vec<i64>| {
        RecordBatch::try_from_iter(vec![
            (
                "row_id",
                Arc::new(StringArray::from(vec!["r1", "r2"])) as ArrayRef,
            ),
            ("converted", Arc::new(BooleanArray::from(vec![true, false]))),
            ("f0", Arc::new(Float32Array::from(vec![0.5, 1.0]))),
            ("f1", Arc::new(Int64Array::from(f1))),
            ("value", Arc::new(Float64Array::from(vec![250.0, -3.0]))),
            ("campaign", Arc::new(LargeStringArray::from(vec!["a", "b"]))),
            ("ignored", Arc::new(Float64Array::from(vec![1.0, 2.0]))),
        ])
        .unwrap()
    };
    let stored = stored_columns(&typed(vec![5, -5]), &schema()).unwrap();
    let (_, uploaded) = run(
        Format::Csv,
        &format!("{HEADER}r1,1,0.5,5,250,a\nr2,0,1,-5,-3,b\n"),
    );
    let column = |name: &str| stored.column_by_name(name).unwrap().clone();
    assert_eq!(stored.num_columns(), 6, "the unknown column is dropped");
    let f1 = column("f1");
    let f1 = f1.as_any().downcast_ref::<Float32Array>().unwrap();
    for (row, record) in uploaded.iter().enumerate() {
        assert_eq!(record.features[4..], f1.value(row).to_le_bytes());
    }
    let labels = column("converted");
    assert_eq!(
        labels
            .as_any()
            .downcast_ref::<UInt8Array>()
            .unwrap()
            .values(),
        &[1, 0]
    );
    let value = column("value");
    assert_eq!(
        value
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap()
            .values(),
        &[100.0, 0.0],
        "clamped as an upload's"
    );
    let campaign = column("campaign");
    assert_eq!(
        campaign
            .as_any()
            .downcast_ref::<UInt32Array>()
            .unwrap()
            .values(),
        &[0, 1]
    );
    assert_eq!(
        stored_columns(&typed(vec![5, 6]), &schema()).unwrap_err(),
        "row 2: f1 = 6 is outside its declared bounds [-5, 5]"
    );
    // Float columns without nulls take a loop of their own: the same
    // values and the same refusals as value by value.
    let with_f0 = |f0: ArrayRef| {
        let batch = typed(vec![5, -5]);
        let schema = batch.schema();
        let columns: Vec<(String, ArrayRef)> = schema
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(field, column)| {
                let column = if field.name() == "f0" { &f0 } else { column };
                (field.name().clone(), column.clone())
            })
            .collect();
        RecordBatch::try_from_iter(columns).unwrap()
    };
    let wide = stored_columns(
        &with_f0(Arc::new(Float64Array::from(vec![0.5, 1.0]))),
        &schema(),
    )
    .unwrap();
    assert_eq!(wide.column_by_name("f0"), stored.column_by_name("f0"));
    for (f0, error) in [
        (
            vec![Some(0.5), Some(1.5)],
            "row 2: f0 = 1.5 is outside its declared bounds [0, 1]",
        ),
        (
            vec![Some(f64::NAN), Some(0.5)],
            "row 1: f0 = NaN is not finite",
        ),
        (vec![Some(0.5), None], "row 2: f0 is null"),
    ] {
        let refused = stored_columns(&with_f0(Arc::new(Float64Array::from(f0))), &schema());
        assert_eq!(refused.unwrap_err(), error);
    }
}

/// Label and dimension columns without nulls are read in one loop each:
/// the same values as value by value, whatever integer, boolean or string
/// type holds them, and a bad value still refused by its row.
#[test]
fn labels_and_dimensions_read_at_once_are_read_as_value_by_value() {
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, BooleanArray, Float64Array, Int8Array, Int8DictionaryArray, Int32Array,
        Int32DictionaryArray, Int64Array, LargeStringArray, RecordBatch, StringArray,
        StringViewArray, UInt8Array, UInt16Array, UInt32Array,
    };

    let batch = |label: ArrayRef, campaign: ArrayRef| {
        RecordBatch::try_from_iter(vec![
            (
                "row_id",
                Arc::new(StringArray::from(vec!["r1", "r2", "r3"])) as ArrayRef,
            ),
            ("converted", label),
            ("f0", Arc::new(Float64Array::from(vec![0.0, 0.5, 1.0]))),
            ("f1", Arc::new(Float64Array::from(vec![0.0, 1.0, 2.0]))),
            ("value", Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]))),
            ("campaign", campaign),
        ])
        .unwrap()
    };
    let stored = |label: ArrayRef, campaign: ArrayRef| {
        stored_columns(&batch(label, campaign), &schema()).map(|stored| {
            let values = |name: &str| {
                let column = stored.column_by_name(name).unwrap();
                match column.as_any().downcast_ref::<UInt8Array>() {
                    Some(labels) => labels.values().iter().map(|&v| u32::from(v)).collect(),
                    None => column
                        .as_any()
                        .downcast_ref::<UInt32Array>()
                        .unwrap()
                        .values()
                        .to_vec(),
                }
            };
            (values("converted"), values("campaign"))
        })
    };
    let strings: ArrayRef = Arc::new(StringArray::from(vec!["b", "a", "b"]));
    let expected = Ok((vec![1, 0, 1], vec![1, 0, 1]));
    for label in [
        Arc::new(BooleanArray::from(vec![true, false, true])) as ArrayRef,
        Arc::new(Int8Array::from(vec![1, 0, 1])),
        Arc::new(Int64Array::from(vec![1, 0, 1])),
        Arc::new(UInt16Array::from(vec![1, 0, 1])),
    ] {
        assert_eq!(stored(label, strings.clone()), expected);
    }
    let labels: ArrayRef = Arc::new(Int8Array::from(vec![1, 0, 1]));
    // Parquet's text columns are read as dictionaries, with keys of any
    // width in an Arrow body's; "zz", undeclared, is in the dictionary but
    // no row's.
    let int8_keys: Int8DictionaryArray = vec!["b", "a", "b"].into_iter().collect();
    for campaign in [
        Arc::new(LargeStringArray::from(vec!["b", "a", "b"])) as ArrayRef,
        Arc::new(StringViewArray::from(vec!["b", "a", "b"])),
        Arc::new(Int32DictionaryArray::new(
            Int32Array::from(vec![2, 0, 2]),
            Arc::new(StringArray::from(vec!["a", "zz", "b"])),
        )),
        Arc::new(int8_keys),
    ] {
        assert_eq!(stored(labels.clone(), campaign), expected);
    }
    assert_eq!(
        stored(
            labels.clone(),
            Arc::new(Int32DictionaryArray::new(
                Int32Array::from(vec![2, 1, 2]),
                Arc::new(StringArray::from(vec!["a", "zz", "b"])),
            ))
        ),
        Err("row 2: campaign = \"zz\" is not a declared value".to_owned())
    );
    assert_eq!(
        stored(
            labels.clone(),
            Arc::new(Int32DictionaryArray::new(
                Int32Array::from(vec![Some(2), Some(0), None]),
                Arc::new(StringArray::from(vec!["a", "zz", "b"])),
            ))
        ),
        Err("row 3: campaign is null".to_owned())
    );
    // Refused as value by value refuses them.
    assert_eq!(
        stored(Arc::new(Int64Array::from(vec![1, 2, 1])), strings.clone()),
        Err("row 2: label converted = 2 is not 0 or 1".to_owned())
    );
    assert_eq!(
        stored(
            Arc::new(Int8Array::from(vec![Some(1), Some(0), None])),
            strings.clone()
        ),
        Err("row 3: converted is null".to_owned())
    );
    assert_eq!(
        stored(
            labels.clone(),
            Arc::new(StringArray::from(vec!["a", "a", "zz"]))
        ),
        Err("row 3: campaign = \"zz\" is not a declared value".to_owned())
    );
    assert_eq!(
        stored(
            labels,
            Arc::new(StringArray::from(vec![Some("a"), None, Some("b")]))
        ),
        Err("row 2: campaign is null".to_owned())
    );
}

/// Values matched as words (at most 8 bytes) or as strings (a longer one
/// declared) get the codes a search of the declared values gives: a
/// prefix, a trailing NUL or a multi-byte character is another value.
#[test]
fn dimension_codes_are_the_declared_positions_of_short_and_long_values() {
    use arrow_array::StringArray;
    use dpgate_api_types::Dimension;

    let declared = |values: &[&str]| Dimension {
        name: "d".to_owned(),
        values: values.iter().map(|v| (*v).to_owned()).collect(),
    };
    let rows = ["ab", "a", "a\0", "é", "abcdefgh", "a"];
    let column = StringArray::from(rows.to_vec());
    let short = declared(&["a", "a\0", "ab", "abcdefgh", "é"]);
    let long = declared(&["a", "a\0", "ab", "abcdefgh", "é", "abcdefghi"]);
    for dimension in [&short, &long] {
        let expected: Vec<u32> = rows
            .iter()
            .map(|row| dimension.values.iter().position(|v| v == row).unwrap() as u32)
            .collect();
        assert_eq!(
            super::arrow_format::codes_at_once(dimension, &column),
            Some(expected)
        );
    }
    // Undeclared, short or long: none, for the value-by-value path to name.
    for dimension in [&short, &long] {
        for undeclared in ["b", "abcdefghij", "abcdefgi", ""] {
            let column = StringArray::from(vec!["a", undeclared]);
            assert_eq!(super::arrow_format::codes_at_once(dimension, &column), None);
        }
    }
}
