//! Unit tests of the Modal client that need no server: settings, GPU specs, ids, URLs,
//! backoff.

use super::exec::uuid_v4;
use super::settings::parse_gpu;
use super::transport::backoff;
use super::*;

#[test]
fn debug_redacts_tokens() {
    let s = ModalSettings {
        token_id: "ak-123".into(),
        token_secret: "as-secret".into(),
        ..Default::default()
    };
    let d = format!("{s:?}");
    assert!(!d.contains("ak-123") && !d.contains("as-secret"), "{d}");
}

#[test]
fn gpu_parsing() {
    let g = parse_gpu("a10g:2").unwrap();
    assert_eq!((g.gpu_type.as_str(), g.count), ("A10G", 2));
    assert_eq!(parse_gpu("H100").unwrap().count, 1);
    assert!(parse_gpu("H100:0").is_err());
    assert!(parse_gpu(":1").is_err());
}

#[test]
fn uuid_shape() {
    let u = uuid_v4();
    assert_eq!(u.len(), 36);
    assert_eq!(&u[14..15], "4");
}

#[tokio::test]
async fn unreachable_https_server_is_unavailable_not_a_panic() {
    assert!(channel("https://api.modal.com:443").is_ok());
    assert!(matches!(channel("ftp://x"), Err(ModalError::Config(_))));
    let s = ModalSettings {
        server_url: "https://127.0.0.1:9".into(),
        token_id: "ak-1".into(),
        token_secret: "as-1".into(),
        ..Default::default()
    };
    let err = ModalClient::connect(s).await.unwrap_err();
    assert!(matches!(err, ModalError::Unavailable(_)), "{err:?}");
    let err = ModalClient::connect(ModalSettings::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ModalError::Unauthenticated(_)), "{err:?}");
}

#[test]
fn backoff_grows_and_is_capped() {
    assert!(backoff(1) < Duration::from_millis(200));
    assert!(backoff(20) <= RETRY_MAX_DELAY + RETRY_MAX_DELAY / 2);
}
