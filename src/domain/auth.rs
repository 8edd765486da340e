//! Bearer tokens: HS256 JWTs signed with the server's key.
//!
//! Validation is strict: the algorithm allow-list is HS256 alone (so `none`
//! and every asymmetric algorithm are refused), `exp`, `iss`, `aud` and `sub`
//! are required, `iss` and `aud` must be dpgate's, `nbf` is checked when
//! present and must be a number. Every token carries a `jti` so it can be
//! revoked.

use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The `iss` of every dpgate token.
pub const ISSUER: &str = "dpgate";
/// The `aud` of every dpgate token.
pub const AUDIENCE: &str = "dpgate-api";
/// Shortest secret accepted from configuration (HS256 wants ≥ 256 bits).
const MIN_SECRET_BYTES: usize = 32;
/// Clock skew tolerated on `exp` and `nbf`.
const LEEWAY_SECONDS: u64 = 30;

/// A token's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Creates datasets, loads rows, sets budgets, audits the ledger.
    Admin,
    /// Asks for releases of the datasets in its `datasets` claim.
    Analyst,
}

/// The claims of a dpgate token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub role: Role,
    /// The datasets an analyst may see and query.
    #[serde(default)]
    pub datasets: Vec<Uuid>,
    pub iss: String,
    pub aud: String,
    pub exp: u64,
    pub iat: u64,
    pub jti: String,
}

/// Why a token was refused (each is a 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidToken(pub String);

/// The server's signing key and validation rules.
#[derive(Clone)]
pub struct Keys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Keys { .. }")
    }
}

/// Seconds since the Unix epoch (a clock before 1970 is read as 1970, which
/// only makes new tokens expire early).
pub fn now() -> u64 {
    u64::try_from(crate::domain::clock::now().unix_timestamp()).unwrap_or(0)
}

impl Keys {
    /// Keys from a secret; refused if shorter than 32 bytes.
    pub fn from_secret(secret: &str) -> anyhow::Result<Self> {
        let secret = secret.trim();
        anyhow::ensure!(
            secret.len() >= MIN_SECRET_BYTES,
            "the signing secret must be at least {MIN_SECRET_BYTES} bytes"
        );
        let mut validation = Validation::new(Algorithm::HS256);
        validation.algorithms = vec![Algorithm::HS256];
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[AUDIENCE]);
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECONDS;
        Ok(Keys {
            encoding: EncodingKey::from_secret(secret.as_bytes()),
            decoding: DecodingKey::from_secret(secret.as_bytes()),
            validation,
        })
    }

    /// Mints a token for `sub` valid for `ttl`.
    pub fn mint(
        &self,
        role: Role,
        sub: &str,
        datasets: &[Uuid],
        ttl: Duration,
    ) -> anyhow::Result<String> {
        let issued = now();
        let claims = Claims {
            sub: sub.to_owned(),
            role,
            datasets: datasets.to_vec(),
            iss: ISSUER.to_owned(),
            aud: AUDIENCE.to_owned(),
            exp: issued + ttl.as_secs(),
            iat: issued,
            jti: Uuid::new_v4().to_string(),
        };
        Ok(jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &self.encoding,
        )?)
    }

    /// Checks a token's signature, algorithm and claims.
    pub fn verify(&self, token: &str) -> Result<Claims, InvalidToken> {
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|error| InvalidToken(format!("invalid token: {error}")))?
            .claims;
        if claims.sub.is_empty() {
            return Err(InvalidToken("invalid token: empty sub".to_owned()));
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::from_secret("0123456789abcdef0123456789abcdef").unwrap()
    }

    #[test]
    fn a_minted_token_verifies_with_its_claims() {
        let dataset = Uuid::new_v4();
        let token = keys()
            .mint(Role::Analyst, "ana", &[dataset], Duration::from_secs(60))
            .unwrap();
        let claims = keys().verify(&token).unwrap();
        assert_eq!(claims.sub, "ana");
        assert_eq!(claims.role, Role::Analyst);
        assert_eq!(claims.datasets, vec![dataset]);
        assert_eq!(
            (claims.iss.as_str(), claims.aud.as_str()),
            (ISSUER, AUDIENCE)
        );
    }

    #[test]
    fn short_secrets_and_foreign_keys_are_refused() {
        assert!(Keys::from_secret("short").is_err());
        let token = keys()
            .mint(Role::Admin, "root", &[], Duration::from_secs(60))
            .unwrap();
        let other = Keys::from_secret("another secret of thirty-two bytes!").unwrap();
        assert!(other.verify(&token).is_err());
    }
}
