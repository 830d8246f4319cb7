//! The argument vector's rules and the instance; running programs is
//! `tests/command.rs`'s.

use super::*;
use crate::error::Error;

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn a_command_needs_a_program_and_no_shell_line() {
    assert_eq!(check_argv(&[]), Err(Error::NoProgram));
    assert_eq!(check_argv(&argv(&["  "])), Err(Error::NoProgram));
    assert_eq!(check_argv(&argv(&["probe", "a\0b"])), Err(Error::Nul(1)));
    assert_eq!(
        check_argv(&argv(&["/usr/local/bin/probe --token s3cret"])),
        Err(Error::CommandLine)
    );
    assert!(
        !Error::CommandLine.to_string().contains("s3cret"),
        "the command is never quoted"
    );
    check_argv(&argv(&["probe"])).unwrap();
    check_argv(&argv(&["/usr/local/bin/probe", "--fast", ""])).unwrap();
    check_argv(&argv(&["sh", "-c", "exit 0"])).unwrap();
}

#[test]
fn credential_arguments_are_found_by_their_option_and_masked() {
    let command = argv(&[
        "/usr/local/bin/probe",
        "--token",
        "s3cret",
        "--api-key=k3y-value",
        "--fast",
        "--password",
        "--verbose",
        "--broker",
        "redis://:hunter2@b:6379/0",
        "--region=eu",
    ]);
    assert_eq!(credential_arguments(&command), ["s3cret", "k3y-value"]);
    assert_eq!(
        redacted_argv(&command),
        [
            "/usr/local/bin/probe",
            "--token",
            "***",
            "--api-key=***",
            "--fast",
            "--password",
            "--verbose",
            "--broker",
            "redis://:***@b:6379/0",
            "--region=eu",
        ]
    );
    // The program itself is never taken for a value.
    assert!(credential_arguments(&argv(&["--token-probe", "x"])).is_empty());
}

#[test]
fn the_instance_is_the_program_without_its_arguments() {
    let executor = executor(
        "my.company.MyExecutor",
        &argv(&["/usr/local/bin/probe", "--token", "s3cret"]),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(executor.instance.as_deref(), Some("/usr/local/bin/probe"));
    let check = CommandCheck::new(&argv(&["probe", "s3cret"]), Duration::from_secs(5)).unwrap();
    assert!(!format!("{check:?}").contains("s3cret"));
    assert_eq!(check.deadline(), Duration::from_millis(4500));
}
