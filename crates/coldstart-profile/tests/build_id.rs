//! A profile is tied to the build it was recorded on.

use std::path::Path;

use coldstart_profile::{profile, ProfileOptions};
use coldstart_profile_format::{FormatError, Profile};
use coldstart_testkit::compile_c;

/// DIR/prog, whose `main` is `body`, with a build-id.
fn build(dir: &Path, body: &str) -> std::path::PathBuf {
    let source = format!("int main(void) {{ {body} }}\n");
    compile_c(dir, "prog", &source, &["-g0", "-Wl,--build-id"])
}

#[test]
fn profile_of_another_build_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build(dir.path(), "return 0;");
    let recording = profile(&ProfileOptions::new(vec![prog.clone().into()])).unwrap();
    let path = dir.path().join("p.json");
    recording.profile.write(&path).unwrap();
    let read = Profile::read(&path).unwrap();
    let module = read.check_build_id(&prog).unwrap();
    assert!(module.functions.iter().any(|f| f.names.contains(&"main".to_string())));

    let _rebuilt = build(dir.path(), "return 1;");
    let err = read.check_build_id(&prog).unwrap_err();
    assert!(matches!(err, FormatError::BuildIdMismatch { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("different build") && msg.contains("re-run `coldstart profile`"), "{msg}");

    let err = read.check_build_id(Path::new("/usr/bin/true")).unwrap_err();
    assert!(matches!(err, FormatError::ModuleNotInProfile { .. }), "{err}");
}
