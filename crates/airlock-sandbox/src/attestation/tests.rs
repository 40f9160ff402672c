use super::*;
use crate::mount_plan::MountStep;
use crate::profile::SandboxProfile;
use crate::seccomp_policy::FILTER_COUNT;

fn ids(id: u32) -> Ids {
    Ids {
        real: id,
        effective: id,
        saved: id,
        fs: id,
    }
}

fn fixture() -> (
    tempfile::TempDir,
    SandboxProfile,
    MountPlan,
    HostView,
    Attestation,
) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let profile = SandboxProfile::new(&ws);
    let plan = MountPlan::for_profile(&profile, &ws).unwrap();
    let host = HostView {
        namespaces: NAMESPACES.iter().map(|n| (n.to_string(), 1)).collect(),
        uid: 1000,
        gid: 1000,
        landlock_abi: 7,
        relay_socket: None,
        overlay: None,
        attached: None,
    };
    let mounts = plan
        .mounts()
        .map(|s| MountEntry {
            mount_point: s.target(),
            root: "/".into(),
            fs_type: "tmpfs".into(),
            read_only: s.read_only(),
            options: if s.read_only() {
                "ro".into()
            } else {
                "rw".into()
            },
            device: "0:99".into(),
            super_options: String::new(),
        })
        .collect();
    let att = Attestation {
        namespaces: NAMESPACES.iter().map(|n| (n.to_string(), 2)).collect(),
        host_namespaces: host.namespaces.clone(),
        uid: ids(1000),
        gid: ids(1000),
        uid_map: vec![IdMapLine {
            inside: 1000,
            outside: 1000,
            count: 1,
        }],
        gid_map: vec![IdMapLine {
            inside: 1000,
            outside: 1000,
            count: 1,
        }],
        cap_effective: 0,
        cap_permitted: 0,
        cap_inheritable: 0,
        cap_bounding: 0,
        cap_ambient: 0,
        no_new_privs: true,
        seccomp_mode: 2,
        seccomp_filters: FILTER_COUNT,
        landlock: LandlockReport {
            kernel_abi: 7,
            applied_abi: 7,
            status: "fully_enforced".into(),
            scoped: true,
            signal_probe_errno: Some(libc::EPERM),
        },
        mounts,
        cgroup: CgroupReport::Unavailable {
            reason: "test".into(),
        },
        weakened: None,
        relay: None,
        overlay: None,
        attached: None,
    };
    (dir, profile, plan, host, att)
}

fn features(
    att: &Attestation,
    profile: &SandboxProfile,
    plan: &MountPlan,
    host: &HostView,
) -> Vec<String> {
    att.verify(profile, plan, host)
        .into_iter()
        .map(|s| s.feature)
        .collect()
}

#[test]
fn full_confinement_passes() {
    let (_d, profile, plan, host, att) = fixture();
    assert_eq!(att.verify(&profile, &plan, &host), vec![]);
}

#[test]
fn each_shortfall_is_named() {
    let (_d, profile, plan, host, good) = fixture();
    type Mutation = Box<dyn Fn(&mut Attestation)>;
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "net namespace",
            Box::new(|a| *a.namespaces.get_mut("net").unwrap() = 1),
        ),
        ("sandbox uid", Box::new(|a| a.uid.effective = 0)),
        (
            "user namespace id map",
            Box::new(|a| a.uid_map[0].outside = 0),
        ),
        ("capabilities", Box::new(|a| a.cap_bounding = 1 << 21)),
        ("capabilities", Box::new(|a| a.cap_ambient = 1)),
        ("no_new_privs", Box::new(|a| a.no_new_privs = false)),
        ("seccomp", Box::new(|a| a.seccomp_filters = 1)),
        ("seccomp", Box::new(|a| a.seccomp_mode = 0)),
        (
            "landlock",
            Box::new(|a| a.landlock.status = "partially_enforced".into()),
        ),
        ("landlock", Box::new(|a| a.landlock.applied_abi = 5)),
        (
            "landlock scoping",
            Box::new(|a| a.landlock.signal_probe_errno = None),
        ),
        ("mounts", Box::new(|a| a.mounts[0].read_only = false)),
        (
            "mounts",
            Box::new(|a| {
                a.mounts.push(MountEntry {
                    mount_point: "/home".into(),
                    root: "/home".into(),
                    fs_type: "ext4".into(),
                    read_only: false,
                    options: "rw".into(),
                    device: "8:1".into(),
                    super_options: String::new(),
                })
            }),
        ),
        (
            "mounts",
            Box::new(|a| {
                a.mounts.retain(|m| m.mount_point != Path::new("/proc/sys"));
            }),
        ),
        (
            "weakened mode",
            Box::new(|a| a.weakened = Some(WeakenedMode::WithoutLandlock)),
        ),
    ];
    for (feature, mutate) in cases {
        let mut att = good.clone();
        mutate(&mut att);
        let found = features(&att, &profile, &plan, &host);
        assert!(
            found.iter().any(|f| f == feature),
            "{feature} not detected: {found:?}"
        );
    }
}

#[test]
fn weakened_mode_accepts_only_what_it_names() {
    let (_d, mut profile, plan, mut host, mut att) = fixture();
    host.landlock_abi = 4; // an older kernel, which is why the operator weakened the mode
    att.landlock.kernel_abi = 4;
    profile.weakened = Some(WeakenedMode::WithoutLandlockScopes);
    att.weakened = profile.weakened;
    att.landlock.applied_abi = 4;
    att.landlock.scoped = false;
    att.landlock.signal_probe_errno = None;
    assert_eq!(att.verify(&profile, &plan, &host), vec![]);
    att.seccomp_filters = 0;
    assert!(features(&att, &profile, &plan, &host).contains(&"seccomp".to_string()));
}

#[test]
fn recursive_binds_may_carry_read_only_submounts_only() {
    let (_d, profile, plan, host, mut att) = fixture();
    att.mounts.push(MountEntry {
        mount_point: "/usr/lib/sub".into(),
        root: "/".into(),
        fs_type: "ext4".into(),
        read_only: true,
        options: "ro".into(),
        device: "8:1".into(),
        super_options: String::new(),
    });
    assert_eq!(att.verify(&profile, &plan, &host), vec![]);
    att.mounts.last_mut().unwrap().read_only = false;
    assert!(features(&att, &profile, &plan, &host).contains(&"mounts".to_string()));
}

#[test]
fn a_mount_where_the_plan_copies_a_file_is_refused() {
    let (_d, profile, plan, host, mut att) = fixture();
    let copied = plan
        .steps
        .iter()
        .find(|s| matches!(s, MountStep::Copy { .. }))
        .expect("this host has small /etc files the plan copies")
        .target();
    assert!(plan.mounts().all(|s| s.target() != copied));
    // What the plan used to do: a read-only bind of the host's file at the same place.
    att.mounts.push(MountEntry {
        mount_point: copied.clone(),
        root: copied.clone(),
        fs_type: "ext4".into(),
        read_only: true,
        options: "ro".into(),
        device: "8:1".into(),
        super_options: String::new(),
    });
    let found = att.verify(&profile, &plan, &host);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].feature, "mounts");
    let expected = format!(
        "{} is a mount (ext4), but the plan puts a copy there",
        copied.display()
    );
    assert!(found[0].detail.contains(&expected), "{found:?}");
}

#[test]
fn kernel_files_parse() {
    let status = "Uid:\t1000\t1000\t1000\t1000\nGid:\t5\t5\t5\t5\nCapEff:\t0000000000000000\nCapBnd:\t000001ffffffffff\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\n";
    let s = parse_status(status);
    assert_eq!(s.uid, Some(ids(1000)));
    assert_eq!(s.cap_eff, 0);
    assert_eq!(s.cap_bnd, 0x1ff_ffff_ffff);
    assert_eq!(
        s.cap_amb,
        u64::MAX,
        "a missing field must not read as empty"
    );
    assert!(s.no_new_privs);
    assert_eq!((s.seccomp, s.seccomp_filters), (2, 3));
    let m = parse_mountinfo(
        "36 35 98:0 /my\\040dir /mnt/a\\040b ro,nosuid master:1 - ext3 /dev/root rw\n",
    );
    assert_eq!(m[0].mount_point, PathBuf::from("/mnt/a b"));
    assert_eq!(m[0].root, PathBuf::from("/my dir"));
    assert!(m[0].read_only);
    assert_eq!(
        parse_id_map("  65534  65534  1\n"),
        vec![IdMapLine {
            inside: 65534,
            outside: 65534,
            count: 1
        }]
    );
}

#[test]
fn relay_shortfalls_are_named() {
    let (_d, mut profile, plan, mut host, mut good) = fixture();
    profile.network = crate::profile::NetworkPolicy::ProxyRelay(crate::profile::ProxyRelay::new(
        "/run/x/proxy.sock",
    ));
    // The profile asks for a relay; none reported.
    assert!(features(&good, &profile, &plan, &host).contains(&"egress relay".to_string()));
    host.relay_socket = Some((7, 42));
    good.relay = Some(RelayReport {
        listen: "127.0.0.1:3128".into(),
        socket_dev: 7,
        socket_ino: 42,
        upstream_error: None,
        uid: 1000,
        cap_effective: 0,
        cap_bounding: 0,
        no_new_privs: true,
        seccomp_filters: FILTER_COUNT,
        landlock_status: "fully_enforced".into(),
    });
    assert_eq!(good.verify(&profile, &plan, &host), vec![]);
    type Mutation = Box<dyn Fn(&mut RelayReport)>;
    let cases: Vec<Mutation> = vec![
        Box::new(|r| r.listen = "0.0.0.0:3128".into()),
        Box::new(|r| r.socket_ino = 43),
        Box::new(|r| r.upstream_error = Some("EACCES".into())),
        Box::new(|r| r.uid = 0),
        Box::new(|r| r.cap_bounding = 1),
        Box::new(|r| r.no_new_privs = false),
        Box::new(|r| r.seccomp_filters = 0),
        Box::new(|r| r.landlock_status = "not_enforced".into()),
    ];
    for (i, mutate) in cases.into_iter().enumerate() {
        let mut att = good.clone();
        mutate(att.relay.as_mut().unwrap());
        let found = features(&att, &profile, &plan, &host);
        assert!(
            found.contains(&"egress relay".to_string()),
            "case {i}: {found:?}"
        );
    }
    // A relay the profile did not ask for is a shortfall too.
    profile.network = crate::profile::NetworkPolicy::LoopbackOnly;
    assert!(features(&good, &profile, &plan, &host).contains(&"egress relay".to_string()));
}

/// A profile with a workspace overlay, its plan, and an attestation that matches it.
fn overlay_fixture() -> (
    [tempfile::TempDir; 2],
    SandboxProfile,
    MountPlan,
    HostView,
    Attestation,
) {
    let (d, mut profile, _, mut host, mut att) = fixture();
    let runs = tempfile::tempdir().unwrap();
    let ws = profile.workspace.clone();
    // A repository: under the overlay nothing of it is bound read-only.
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "").unwrap();
    let o = crate::WorkspaceOverlay::create(runs.path(), "r", 4242, 4242).unwrap();
    profile.workspace_overlay = Some(o.clone());
    let plan = MountPlan::for_profile(&profile, &ws).unwrap();
    let ids = OverlayReport {
        lower: FileId::of(&ws).unwrap(),
        upper: FileId::of(&o.upper).unwrap(),
        work: FileId::of(&o.work).unwrap(),
    };
    host.overlay = Some(ids);
    att.overlay = Some(ids);
    att.mounts = plan
        .mounts()
        .map(|s| {
            let overlay = matches!(s, MountStep::Overlay { .. });
            MountEntry {
                mount_point: s.target(),
                root: "/".into(),
                fs_type: if overlay { "overlay" } else { "tmpfs" }.into(),
                read_only: s.read_only(),
                options: if s.read_only() { "ro" } else { "rw" }.into(),
                device: if overlay { "0:48" } else { "0:99" }.into(),
                super_options: if overlay {
                    "rw,lowerdir=/overlay/lower,upperdir=/overlay/layers/upper,workdir=/overlay/layers/work,redirect_dir=nofollow,uuid=on,userxattr".into()
                } else {
                    String::new()
                },
            }
        })
        .collect();
    ([d, runs], profile, plan, host, att)
}

#[test]
fn overlay_plan_mounts_the_workspace_only_through_the_overlay() {
    let (_d, profile, plan, host, att) = overlay_fixture();
    assert_eq!(att.verify(&profile, &plan, &host), vec![]);
    let ws = &profile.workspace;
    let at_ws: Vec<_> = plan
        .steps
        .iter()
        .filter(|s| s.target().starts_with(ws))
        .collect();
    assert_eq!(at_ws.len(), 1, "{at_ws:?}");
    assert!(matches!(at_ws[0], MountStep::Overlay { lower, .. } if lower == ws));
    assert!(!plan.steps.iter().any(|s| matches!(s,
        MountStep::Bind { source, read_only: false, .. } if source.starts_with(ws))));
}

#[test]
fn overlay_shortfalls_are_named() {
    let (_d, profile, plan, host, good) = overlay_fixture();
    // Leaked so that the closure below is `Copy` and every case can use it.
    let ws: &'static Path = Box::leak(profile.workspace.clone().into_boxed_path());
    let at_ws = move |a: &mut Attestation| -> usize {
        a.mounts.iter().rposition(|m| m.mount_point == ws).unwrap()
    };
    let device = host.overlay.unwrap().lower.device_text();
    type Mutation = Box<dyn Fn(&mut Attestation)>;
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "is a ext4 mount, not the overlay",
            Box::new(move |a| {
                let i = at_ws(a);
                a.mounts[i].fs_type = "ext4".into();
            }),
        ),
        (
            "lacks userxattr",
            Box::new(move |a| {
                let i = at_ws(a);
                a.mounts[i].super_options = a.mounts[i].super_options.replace(",userxattr", "");
            }),
        ),
        (
            "follows redirects",
            Box::new(move |a| {
                let i = at_ws(a);
                a.mounts[i].super_options = a.mounts[i]
                    .super_options
                    .replace("redirect_dir=nofollow", "redirect_dir=on");
            }),
        ),
        (
            "upperdir",
            Box::new(move |a| {
                let i = at_ws(a);
                a.mounts[i].super_options = a.mounts[i]
                    .super_options
                    .replace("layers/upper", "layers/elsewhere");
            }),
        ),
        (
            "upper layer is inode",
            Box::new(|a| a.overlay.as_mut().unwrap().upper.ino += 1),
        ),
        (
            "lower layer (the workspace) is inode",
            Box::new(|a| a.overlay.as_mut().unwrap().lower.dev += 1),
        ),
        ("reports none", Box::new(|a| a.overlay = None)),
        (
            "writable mount of the workspace's file system",
            Box::new(move |a| {
                a.mounts.push(MountEntry {
                    mount_point: "/tmp/real-workspace".into(),
                    root: "/ws".into(),
                    fs_type: "ext4".into(),
                    read_only: false,
                    options: "rw".into(),
                    device: device.clone(),
                    super_options: "rw".into(),
                })
            }),
        ),
    ];
    for (detail, mutate) in cases {
        let mut att = good.clone();
        mutate(&mut att);
        let found = att.verify(&profile, &plan, &host);
        assert!(
            found
                .iter()
                .any(|s| s.feature == "workspace overlay" && s.detail.contains(detail)),
            "{detail} not detected: {found:?}"
        );
    }
    // A sandbox that reports an overlay the profile does not ask for is refused too.
    let (_d2, plain, plain_plan, mut plain_host, mut plain_att) = fixture();
    plain_att.overlay = good.overlay;
    plain_host.overlay = None;
    let found = plain_att.verify(&plain, &plain_plan, &plain_host);
    assert!(
        found.iter().any(|s| s.feature == "workspace overlay"),
        "{found:?}"
    );
}

#[test]
fn i2_a_sandbox_holding_another_runs_workspace_cwd_or_environment_is_refused() {
    let (_d, profile, plan, mut host, mut good) = fixture();
    let expected = AttachedReport {
        cwd: profile.workspace.join("sub"),
        workspace: FileId { dev: 1, ino: 2 },
        env_sha256: crate::payload_env::digest(&profile.env),
    };
    host.attached = Some(expected.clone());
    good.attached = Some(expected);
    assert_eq!(good.verify(&profile, &plan, &host), vec![]);
    type Mutation = Box<dyn Fn(&mut AttachedReport)>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("working directory", Box::new(|a| a.cwd = "/tmp".into())),
        ("workspace", Box::new(|a| a.workspace.ino = 3)),
        ("environment", Box::new(|a| a.env_sha256 = "0".repeat(64))),
    ];
    for (feature, mutate) in cases {
        let mut att = good.clone();
        mutate(att.attached.as_mut().unwrap());
        assert_eq!(features(&att, &profile, &plan, &host), vec![feature]);
    }
    let mut silent = good.clone();
    silent.attached = None;
    assert_eq!(
        features(&silent, &profile, &plan, &host),
        vec!["attached run"]
    );
}
