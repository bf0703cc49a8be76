//! Ids, secrets and timestamps (spec 02 §1.1, §2; C-015, C-195, C-208, C-234).

use proto::wire::ids::*;
use proto::wire::time::*;

#[test]
fn c015_c234_id_formats() {
    let bytes: [u8; 16] = [
        0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0xa1, 0xb2, 0xc3,
        0xd4,
    ];
    assert_eq!(
        make_id(IdKind::Session, bytes),
        "ses_a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4"
    );
    assert_eq!(
        make_id(IdKind::Event, [0; 16]),
        "evt_00000000000000000000000000000000"
    );
    assert_eq!(
        make_id(IdKind::Key, [0xff; 16]),
        "key_ffffffffffffffffffffffffffffffff"
    );
    assert_eq!(
        make_id(IdKind::Profile, [0x0f; 16]),
        format!("pro_{}", "0f".repeat(16))
    );
    assert_eq!(
        make_id(IdKind::Subagent, [0x10; 16]),
        format!("sba_{}", "10".repeat(16))
    );
    for kind in IdKind::ALL {
        let id = make_id(kind, [7; 16]);
        assert_eq!(id.len(), 36);
        assert!(is_id(kind, &id));
        for other in IdKind::ALL {
            assert_eq!(is_id(other, &id), other == kind);
        }
    }
    assert!(
        !is_id(IdKind::Session, "ses_A1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4"),
        "uppercase hex rejected"
    );
    assert!(
        !is_id(IdKind::Session, "ses_a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d"),
        "short rejected"
    );
    assert!(
        !is_id(IdKind::Session, "ses_a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4a"),
        "long rejected"
    );
    assert!(
        !is_id(IdKind::Session, "ses_g1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4"),
        "non-hex rejected"
    );
    assert!(!is_id(IdKind::Session, ""));
    assert!(!is_id(IdKind::Session, "ses_…"));
}

/// C-015: a time-ordered id keeps the format; its first 12 hex digits are
/// the creation time in ms and the other 20 come from the random bytes, so
/// ids made later sort after earlier ones. `Random` keeps all 16 bytes.
#[test]
fn c015_time_ordered_ids_keep_the_format_and_sort_by_creation() {
    let random = [0xabu8; 16];
    let at = 0x0193_8a2b_4c5d_u64; // 2024-12, as Unix ms
    let id = make_id(IdKind::Event, IdOrder::Time.bytes(at, random));
    assert_eq!(id, format!("evt_01938a2b4c5d{}", "ab".repeat(10)));
    assert!(is_id(IdKind::Event, &id));
    assert_eq!(IdOrder::Random.bytes(at, random), random);
    assert_eq!(IdOrder::default(), IdOrder::Time);
    // Later creations sort after earlier ones whatever their random bytes.
    let early = make_id(IdKind::Session, IdOrder::Time.bytes(at, [0xff; 16]));
    let later = make_id(IdKind::Session, IdOrder::Time.bytes(at + 1, [0; 16]));
    assert!(early < later, "{early} < {later}");
    // Only the low 48 bits of the clock are used (valid until year 10889).
    let wrapped = IdOrder::Time.bytes(u64::MAX, [0; 16]);
    assert_eq!(&wrapped[..6], &[0xff; 6]);
    assert_eq!(&wrapped[6..], &[0; 10]);
}

#[test]
fn c015_c195_c208_secret_formats() {
    let b: [u8; 24] = core::array::from_fn(|i| i as u8 * 11);
    let client = make_secret(SecretKind::Client, b);
    let session = make_secret(SecretKind::Session, b);
    let admin = make_secret(SecretKind::Admin, b);
    assert_eq!(client, format!("bae_{}", to_hex(&b)));
    assert_eq!(client.len(), 4 + 48);
    assert_eq!(session.len(), 8 + 48);
    assert_eq!(admin.len(), 10 + 48);
    assert!(session.starts_with("bae_ses_"));
    assert!(admin.starts_with("bae_admin_"));
    for (kind, s) in [
        (SecretKind::Client, &client),
        (SecretKind::Session, &session),
        (SecretKind::Admin, &admin),
    ] {
        assert_eq!(secret_kind(s), Some(kind));
        for other in SecretKind::ALL {
            assert_eq!(is_secret(other, s), other == kind, "{other:?} vs {s}");
        }
    }
    assert_eq!(
        make_secret(
            SecretKind::Session,
            [
                0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x1a, 0x2b,
                0x3c, 0x4d, 0x5e, 0x6f, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f
            ]
        ),
        "bae_ses_1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f"
    );
    // C-195: prefix is the first 8 characters.
    assert_eq!(
        key_prefix("bae_1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f"),
        "bae_1a2b"
    );
    assert_eq!(key_prefix("short"), "short");
    assert_eq!(secret_kind("bae_"), None);
    assert_eq!(secret_kind("Bearer x"), None);
    assert_eq!(SecretKind::Session.role(), "session");
}

#[test]
fn created_at_known_instants() {
    let cases: &[(u64, &str)] = &[
        (0, "1970-01-01T00:00:00.000Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        (999, "1970-01-01T00:00:00.999Z"),
        (86_399_999, "1970-01-01T23:59:59.999Z"),
        (86_400_000, "1970-01-02T00:00:00.000Z"),
        (68_214_896_000, "1972-02-29T12:34:56.000Z"),
        (946_684_799_999, "1999-12-31T23:59:59.999Z"),
        (946_684_800_000, "2000-01-01T00:00:00.000Z"),
        (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        (951_868_800_000, "2000-03-01T00:00:00.000Z"),
        (1_783_362_370_123, "2026-07-06T18:26:10.123Z"),
        (4_107_542_399_000, "2100-02-28T23:59:59.000Z"),
        (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
        (13_574_563_200_000, "2400-02-29T00:00:00.000Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
    ];
    for &(ms, s) in cases {
        assert_eq!(format_created_at(ms), s, "{ms}");
        assert!(is_created_at(s));
    }
    assert_eq!(
        format_sqlite_datetime(1_783_362_370_999),
        "2026-07-06 18:26:10"
    );
    assert_eq!(format_sqlite_datetime(0), "1970-01-01 00:00:00");
    assert_eq!(
        format_sqlite_datetime(951_782_400_000),
        "2000-02-29 00:00:00"
    );
    // Past year 9999 the year keeps all its digits (the general path).
    assert_eq!(
        format_created_at(253_402_300_800_000),
        "10000-01-01T00:00:00.000Z"
    );
    // Far future does not panic.
    let _ = format_created_at(u64::MAX);
}

fn is_leap(y: u64) -> bool {
    matches!((y % 4, y % 100, y % 400), (0, 1.., _) | (_, _, 0))
}

#[test]
fn civil_from_days_matches_naive_calendar_walk() {
    // Walk day by day from 1970-01-01 across 2100 and 2400 boundaries.
    let (mut y, mut m, mut d) = (1970u64, 1u32, 1u32);
    let month_len = |y: u64, m: u32| match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            if is_leap(y) {
                29
            } else {
                28
            }
        }
    };
    for days in 0..160_000u64 {
        assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
        d += 1;
        if d > month_len(y, m) {
            d = 1;
            m += 1;
            if m > 12 {
                m = 1;
                y += 1;
            }
        }
    }
    assert!(y > 2400);
}

#[test]
fn c234_created_at_shape_check() {
    assert!(is_created_at("2026-07-06T18:26:01.000Z"));
    assert!(!is_created_at("2026-07-06T18:26:01Z"));
    assert!(!is_created_at("2026-07-06 18:26:01.000Z"));
    assert!(!is_created_at("2026-07-06T18:26:01.0000Z"));
    assert!(!is_created_at("2026-07-06T18:26:01.000z"));
}

/// `parse_created_at` inverts `format_created_at` over a spread of instants
/// (leap days, month ends, the epoch) and rejects what is not a real instant.
#[test]
fn created_at_parses_back_to_the_same_instant() {
    use proto::wire::time::{format_created_at, parse_created_at};
    let mut ms: u64 = 0;
    for i in 0..20_000u64 {
        let text = format_created_at(ms);
        assert_eq!(parse_created_at(&text), Some(ms), "{text}");
        // A step that is not a divisor of a day walks across every field.
        ms += 86_400_000 * 7 + 3_601_001 + i;
    }
    for leap in ["2024-02-29T23:59:59.999Z", "2000-02-29T00:00:00.000Z"] {
        let v = parse_created_at(leap).expect(leap);
        assert_eq!(format_created_at(v), leap);
    }
    for bad in [
        "2023-02-29T00:00:00.000Z",
        "1900-02-29T00:00:00.000Z",
        "2026-13-01T00:00:00.000Z",
        "2026-04-31T00:00:00.000Z",
        "2026-01-01T24:00:00.000Z",
        "2026-01-01T00:60:00.000Z",
        "1969-12-31T23:59:59.999Z",
        "2026-01-01 00:00:00",
        "",
    ] {
        assert_eq!(parse_created_at(bad), None, "{bad}");
    }
}
