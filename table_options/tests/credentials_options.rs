//! `service-account-key-file` in a WITH clause: mapped to the profile, exclusive with
//! `emulator-endpoint`, never echoed (SPEC 5.3, 10).

use pubsub_engine_spi::{ConnectorOptions, OptionError};
use pubsub_schema::Authentication;
use pubsub_table_options::{
    profile_from_options, EMULATOR_ENDPOINT, KNOWN_OPTIONS, SERVICE_ACCOUNT_KEY_FILE,
};

const PATH: &str = "/secret/place/marker-4c1d/key.json";

fn opts(pairs: &[(&str, &str)]) -> ConnectorOptions {
    ConnectorOptions::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

#[test]
fn key_file_is_a_known_option() {
    assert_eq!(SERVICE_ACCOUNT_KEY_FILE, "service-account-key-file");
    assert!(KNOWN_OPTIONS.contains(&SERVICE_ACCOUNT_KEY_FILE));
}

#[test]
fn key_file_maps_to_the_profile_without_reading_it() {
    // The file does not exist: the plan does not read it.
    let mut o = opts(&[("project", "p"), (SERVICE_ACCOUNT_KEY_FILE, PATH)]);
    let p = profile_from_options(&mut o).unwrap();
    assert_eq!(
        p.authentication,
        Authentication::ServiceAccountKeyFile {
            path: PATH.to_string()
        }
    );
    assert!(o.is_empty(), "the option is consumed");
}

#[test]
fn neither_option_means_application_default_credentials() {
    let p = profile_from_options(&mut opts(&[("project", "p")])).unwrap();
    assert_eq!(p.authentication, Authentication::ApplicationDefault);
}

#[test]
fn key_file_and_emulator_endpoint_conflict_naming_both_without_the_path() {
    let e = profile_from_options(&mut opts(&[
        ("project", "p"),
        (EMULATOR_ENDPOINT, "127.0.0.1:8085"),
        (SERVICE_ACCOUNT_KEY_FILE, PATH),
    ]))
    .unwrap_err();
    assert!(matches!(e, OptionError::Conflict { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("'emulator-endpoint'") && e.contains("'service-account-key-file'"),
        "{e}"
    );
    assert!(!e.contains("marker-4c1d") && !e.contains("/secret"), "{e}");
}

#[test]
fn blank_key_file_is_rejected_naming_the_key() {
    for blank in ["", "   "] {
        let e = profile_from_options(&mut opts(&[
            ("project", "p"),
            (SERVICE_ACCOUNT_KEY_FILE, blank),
        ]))
        .unwrap_err();
        assert!(matches!(e, OptionError::Invalid { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("option 'service-account-key-file' is invalid") && e.contains("blank"),
            "{e}"
        );
    }
}
