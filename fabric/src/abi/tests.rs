use std::mem::{offset_of, size_of};

use super::*;

#[test]
fn the_provider_declares_its_cores_version_of_a_known_major() {
    assert_eq!(declared_version(fi_version(1, 17)), Some(fi_version(1, 17)));
    assert_eq!(declared_version(fi_version(2, 5)), Some(fi_version(2, 5)));
    assert_eq!(declared_version(fi_version(2, 9)), Some(fi_version(2, 9)));
    assert_eq!(declared_version(fi_version(3, 0)), None);
    assert_eq!(BINDINGS_VERSION, fi_version(1, 17));
}

#[test]
fn the_domain_tail_follows_the_version() {
    assert_eq!(DomainTail::of(fi_version(1, 17)), DomainTail::default());
    assert_eq!(DomainTail::of(fi_version(1, 19)), DomainTail::default());
    let t = DomainTail::of(fi_version(1, 20));
    assert!(t.max_ep_auth_key && !t.max_group_id && !t.max_cntr_value);
    let t = DomainTail::of(fi_version(2, 0));
    assert!(t.max_ep_auth_key && t.max_group_id && !t.max_cntr_value);
    let t = DomainTail::of(fi_version(2, 5));
    assert!(t.max_ep_auth_key && t.max_group_id && t.max_cntr_value);
    // Hints: only what both the core and the caller have.
    let both = DomainTail::of(fi_version(2, 5)).and(DomainTail::of(fi_version(1, 18)));
    assert_eq!(both, DomainTail::default());
}

#[test]
fn the_2_x_mirrors_append_to_the_1_17_structs() {
    assert_eq!(
        offset_of!(DomainAttr2, max_ep_auth_key),
        size_of::<fi::fi_domain_attr>()
    );
    assert_eq!(
        offset_of!(CqErrEntry2, src_addr),
        size_of::<fi::fi_cq_err_entry>()
    );
    for g in GROWN {
        assert!(g.size_2_5 > g.v1.size, "{}", g.v1.name);
        for (f, off) in g.appended {
            assert!(*off >= g.v1.size, "{}.{f}", g.v1.name);
        }
    }
    let d = GROWN
        .iter()
        .find(|g| g.v1.name == "fi_domain_attr")
        .unwrap();
    assert_eq!(d.size_2_5, size_of::<DomainAttr2>());
    assert_eq!(
        d.appended,
        &[
            ("max_ep_auth_key", offset_of!(DomainAttr2, max_ep_auth_key)),
            ("max_group_id", offset_of!(DomainAttr2, max_group_id)),
            ("max_cntr_value", offset_of!(DomainAttr2, max_cntr_value)),
            (
                "max_err_cntr_value",
                offset_of!(DomainAttr2, max_err_cntr_value)
            ),
        ]
    );
    let e = GROWN
        .iter()
        .find(|g| g.v1.name == "fi_cq_err_entry")
        .unwrap();
    assert_eq!(e.size_2_5, size_of::<CqErrEntry2>());
    assert_eq!(
        e.appended,
        &[("src_addr", offset_of!(CqErrEntry2, src_addr))]
    );
}

#[test]
fn no_constant_is_listed_twice() {
    let mut names: Vec<&str> = CONSTANTS.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n);
}
