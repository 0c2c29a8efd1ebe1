//! Tests of the command line: parsing, conversion and checks.

use std::time::Duration;

use clap::Parser;
use runtime::WaitPolicy;

use super::*;
use crate::modes::wait_label;

#[test]
fn ctp_resolves_by_remote() {
    let parse = |v: &[&str]| Args::parse_from(std::iter::once("netgauge").chain(v.iter().copied()));
    assert_eq!(
        parse(&["-m", "ctp", "-R", "02:00:00:00:00:01"]).resolve_modes(),
        vec![Mode::CtpEdp]
    );
    assert_eq!(
        parse(&["-m", "ctp", "-R", "198.18.0.1"]).resolve_modes(),
        vec![Mode::CtpUdp]
    );
    assert_eq!(parse(&["--local"]).resolve_modes(), Mode::ALL.to_vec());
    assert_eq!(
        parse(&["--local", "-m", "edp,udp,edp"]).resolve_modes(),
        vec![Mode::Edp, Mode::Udp]
    );
    assert!("foo".parse::<ModeArg>().is_err());
}

#[test]
fn comm_modes_parse_and_resolve_like_ctp() {
    let parse = |v: &[&str]| Args::parse_from(std::iter::once("netgauge").chain(v.iter().copied()));
    assert_eq!(
        parse(&["-m", "comm", "-R", "02:00:00:00:00:01"]).resolve_modes(),
        vec![Mode::CommEdp]
    );
    assert_eq!(
        parse(&["-m", "comm", "-R", "198.18.0.1"]).resolve_modes(),
        vec![Mode::CommUdp]
    );
    assert_eq!(
        parse(&["--local", "-m", "comm"]).resolve_modes(),
        vec![Mode::CommUdp, Mode::CommEdp]
    );
    assert_eq!(
        parse(&["--local", "-m", "comm-edp,ctp-edp,edp"]).resolve_modes(),
        vec![Mode::CommEdp, Mode::CtpEdp, Mode::Edp]
    );
    // Every mode's name parses back to it; "all" holds both.
    for m in Mode::ALL {
        assert_eq!(m.name().parse::<ModeArg>(), Ok(ModeArg::One(m)));
    }
    assert!(Mode::ALL.contains(&Mode::CommUdp) && Mode::ALL.contains(&Mode::CommEdp));
    // comm-edp is addressed by MAC and takes --loss; comm-udp does not.
    assert!(Mode::CommEdp.is_ethernet() && !Mode::CommUdp.is_ethernet());
    assert!(!Mode::CommEdp.is_lossy() && !Mode::CommUdp.is_lossy());
    assert!(parse(&["--local", "-m", "comm-edp", "--loss", "1"])
        .validate()
        .is_ok());
    let e = parse(&["--local", "-m", "comm-udp", "--loss", "1"])
        .validate()
        .unwrap_err();
    assert!(e.contains("comm-udp"), "{e}");
}

fn parse(v: &[&str]) -> Args {
    Args::parse_from(std::iter::once("netgauge").chain(v.iter().copied()))
}

#[test]
fn faults_are_refused_for_kernel_modes() {
    let e = parse(&["--local", "-m", "edp,udp,tcp", "--loss", "1"])
        .validate()
        .unwrap_err();
    assert!(e.contains("cannot apply to udp, tcp (kernel"), "{e}");
    let e = parse(&["-R", "10.0.0.1", "-m", "ctp", "--dup", "2"])
        .validate()
        .unwrap_err();
    assert!(e.contains("ctp-udp"), "{e}");
    assert_eq!(
        parse(&["--local", "-m", "eth,edp,esp,ctp-edp", "--loss", "1"]).validate(),
        Ok(())
    );
    // No fault asked for: kernel modes are fine.
    assert_eq!(parse(&["--local", "-m", "udp,tcp"]).validate(), Ok(()));
}

#[test]
fn man_page_documents_the_options() {
    let mut out = Vec::new();
    write_man_page(&mut out).unwrap();
    let man = String::from_utf8(out).unwrap();
    assert!(man.starts_with(".ie"), "{}", &man[..200]);
    assert!(man.contains(".TH netgauge 1"), "{man}");
    for opt in [
        "\\-\\-full\\-log",
        "\\-\\-csv",
        "\\-\\-local",
        "netgauge \\-a \\-I eth0",
    ] {
        assert!(man.contains(opt), "{opt} missing: {man}");
    }
}

#[test]
fn grad_follows_netgauge() {
    assert_eq!(parse(&[]).grade, 2, "netgauge's default --grad");
    assert_eq!(parse(&["--grad", "1"]).grade, 1);
    assert_eq!(parse(&["--grade", "3"]).grade, 3, "the old name");
    assert_eq!(parse(&["-g", "4"]).grade, 4);
    let help = <Args as clap::CommandFactory>::command()
        .render_long_help()
        .to_string();
    assert!(help.contains("--grad <GRADE>"), "{help}");
    assert!(
        !help.contains("--grade <"),
        "the alias stays hidden: {help}"
    );
}

#[test]
fn outputs_verbosity_and_help() {
    let a = parse(&["-o", "r.CSV", "-vv"]);
    assert_eq!(a.csv_path(), Some(std::path::Path::new("r.CSV")));
    assert_eq!(a.long_form_path(), None);
    assert_eq!(a.log_level(), "debug");
    let a = parse(&["-o", "r.txt", "--csv", "x.csv"]);
    assert_eq!(a.csv_path(), Some(std::path::Path::new("x.csv")));
    assert_eq!(a.long_form_path(), Some(std::path::Path::new("r.txt")));
    assert_eq!(a.log_level(), "warn");
    assert_ne!(a.port, 5201, "5201 is iperf3's port");
    let help = <Args as clap::CommandFactory>::command()
        .render_long_help()
        .to_string();
    assert!(help.contains("netgauge -a -I eth0"), "{help}");
    assert!(help.contains("--local"), "{help}");
}

#[test]
fn wait_policies_parse_and_label() {
    let w = |s: &str| s.parse::<Wait>().map(|w| w.0);
    assert_eq!(w("busy"), Ok(WaitPolicy::BusyPoll));
    assert_eq!(w("BLOCK"), Ok(WaitPolicy::Block));
    assert_eq!(w("adaptive"), Ok(WaitPolicy::DEFAULT));
    assert_eq!(
        w("adaptive:20"),
        Ok(WaitPolicy::Adaptive {
            spin: Duration::from_micros(20)
        })
    );
    assert!(w("adaptive:x").is_err());
    assert!(w("adaptive:2000000").is_err());
    assert!(w("spin").is_err());
    for s in ["busy", "block", "adaptive:50", "adaptive:0"] {
        assert_eq!(s.parse::<Wait>().unwrap().label(), s);
    }
    assert!(!"adaptive:0".parse::<Wait>().unwrap().spins());
    assert!("adaptive:1".parse::<Wait>().unwrap().spins());
}

#[test]
fn wait_defaults_busy_poll_synonym_and_labels() {
    let a = parse(&["--local"]);
    assert_eq!(a.wait().0, WaitPolicy::DEFAULT);
    assert_eq!(wait_label(a.wait(), Mode::Edp), "adaptive:50");
    assert_eq!(wait_label(a.wait(), Mode::Udp), "block");
    assert_eq!(wait_label(a.wait(), Mode::TcpBp), "so_busy_poll:50");
    let b = parse(&["--local", "--busy-poll"]);
    assert_eq!(b.wait().0, WaitPolicy::BusyPoll);
    assert_eq!(wait_label(b.wait(), Mode::Eth), "busy");
    assert_eq!(wait_label(b.wait(), Mode::Tcp), "busy");
    assert!(b.validate().is_ok());
    let c = parse(&["--local", "--busy-poll", "--wait", "busy"]);
    assert!(c.validate().is_ok());
    let d = parse(&["--local", "--busy-poll", "--wait", "block"]);
    assert!(d.validate().unwrap_err().contains("--busy-poll"));
}

#[test]
fn default_local_modes_follow_the_wait_policy() {
    // The raw floor first; the kernel busy-poll modes only when our
    // side spins.
    assert_eq!(parse(&["--local"]).resolve_modes()[0], Mode::Eth);
    let block = parse(&["--local", "--wait", "block"]).resolve_modes();
    assert!(!block.iter().any(|m| m.is_kernel_busy_poll()), "{block:?}");
    assert_eq!(block.len(), Mode::ALL.len() - 2);
    let busy = parse(&["--local", "--busy-poll"]).resolve_modes();
    assert!(busy.contains(&Mode::UdpBp) && busy.contains(&Mode::TcpBp));
    // Asked for by name, they run whatever the policy.
    assert_eq!(
        parse(&["--local", "--wait", "block", "-m", "eth,udp-bp,tcp-bp"]).resolve_modes(),
        vec![Mode::Eth, Mode::UdpBp, Mode::TcpBp]
    );
    assert_eq!(
        parse(&["--local", "--wait", "block", "-m", "all"]).resolve_modes(),
        block
    );
}

#[test]
fn multicast_modes_follow_netgauges_conventions() {
    let a = parse(&[
        "-m",
        "mak,norm,raw,esp",
        "-x",
        "1toN",
        "--hosts",
        "3,7",
        "-s",
        "512-1024",
        "-g",
        "1",
        "--loss",
        "5",
        "-c",
        "50",
    ]);
    assert!(a.is_mcast());
    assert_eq!(a.validate(), Ok(()));
    let c = a.mcast_config();
    assert_eq!(
        c.modes,
        vec![
            McastMode::Mak,
            McastMode::Norm,
            McastMode::Raw,
            McastMode::Esp
        ]
    );
    assert_eq!(c.receivers, vec![2, 6]);
    assert_eq!(c.sizes, vec![512, 1024]);
    assert!((c.loss - 0.05).abs() < 1e-12, "percent on the command line");
    assert_eq!(c.count, 50);
    // A run's bound: 60 s unless --timeout; the sessions' stays 10 s.
    assert_eq!(c.timeout, Duration::from_secs(60));
    assert_eq!(a.session(Mode::Edp).timeout, Duration::from_secs(10));
    assert!(parse(&["--local", "--timeout=-1"])
        .validate()
        .unwrap_err()
        .contains("--timeout"));
    // Without -s: 1024-byte messages, as before.
    assert_eq!(
        parse(&["-m", "mak", "-x", "1toN"]).mcast_config().sizes,
        vec![1024]
    );
    // Every multicast mode parses by its name.
    for m in McastMode::ALL {
        let want = if m == McastMode::Esp {
            ModeArg::One(Mode::Esp)
        } else {
            ModeArg::Mcast(m)
        };
        assert_eq!(m.name().parse::<ModeArg>(), Ok(want));
    }
}

#[test]
fn multicast_runs_are_checked() {
    let err = |v: &[&str]| parse(v).validate().unwrap_err();
    assert!(err(&["-m", "mak,edp", "-x", "1toN"]).contains("run on their own"));
    assert!(err(&["-m", "mak"]).contains("-x 1toN"));
    assert!(err(&["-m", "mak", "-x", "1toN", "--hosts", "17"]).contains("2..=16"));
    assert!(err(&["-m", "mak", "-x", "1toN", "--loss", "60"]).contains("--loss"));
    assert!(err(&["-m", "mak", "-x", "1toN", "--dup", "1"]).contains("loss only"));
    assert!(err(&["-m", "mak", "-x", "1toN", "-c", "5"]).contains("at least 10"));
    assert!(err(&["-m", "mak", "-x", "1toN", "-R", "10.0.0.1"]).contains("drop -a, -R"));
    // A list of hosts is the multicast modes' sweep only.
    assert!(err(&["--local", "-x", "1toN", "--hosts", "3,4"]).contains("one number"));
}

#[test]
fn help_lists_every_mode() {
    let help = <Args as clap::CommandFactory>::command()
        .render_long_help()
        .to_string();
    for m in Mode::ALL
        .iter()
        .map(|m| m.name())
        .chain(McastMode::ALL.iter().map(|m| m.name()))
    {
        assert!(help.contains(&format!(" {m}")), "{m} missing: {help}");
    }
}

#[test]
fn idle_options_are_checked() {
    assert!(parse(&["--local", "--idle-procs", "4"]).validate().is_ok());
    assert!(parse(&["--local", "--idle-procs", "0"]).validate().is_err());
    assert!(parse(&["-R", "198.18.0.1", "--idle-procs", "2"])
        .validate()
        .unwrap_err()
        .contains("--local"));
    assert!(parse(&["--local", "--idle-edp", "100000"])
        .validate()
        .is_err());
    assert!(parse(&["--hold"]).validate().is_err());
    assert!(parse(&["--hold", "-I", "lo"]).validate().is_ok());
}

#[test]
fn bridge_is_for_two_host_local_runs() {
    let ok = |v: &[&str]| parse(v).validate();
    assert!(ok(&["--local", "--bridge", "-x", "stream", "-m", "eth,edp,tcp"]).is_ok());
    assert!(parse(&["--local", "--bridge"]).local_config().bridge);
    assert!(!parse(&["--local"]).local_config().bridge);
    assert!(ok(&["--local", "--bridge", "-x", "stream_bidir", "-m", "edp"]).is_ok());
    assert!(
        parse(&["--local", "--bridge", "-x", "stream_bidir"])
            .cluster_config()
            .bridge
    );
    for v in [
        &["--bridge", "-R", "198.18.0.1"][..],
        &["--local", "--bridge", "-x", "1toN", "--hosts", "3"],
        &["--local", "--bridge", "--link", "udp"],
    ] {
        assert!(ok(v).unwrap_err().contains("--bridge"), "{v:?}");
    }
}
