//! The options' names and the variables that set them, table-tested.

use super::*;

fn conf(vars: &[(&str, &str)]) -> AirflowConf {
    AirflowConf::read(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))).unwrap()
}

#[test]
fn variable_names_follow_airflows_spelling() {
    assert_eq!(BROKER_URL.variable(None), "AIRFLOW__CELERY__BROKER_URL");
    assert_eq!(
        BROKER_URL.variable(Some("team_a")),
        "AIRFLOW__TEAM_A___CELERY__BROKER_URL"
    );
    assert_eq!(
        env_var_name("celery_broker_transport_options", "x", None),
        "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__X"
    );
}

#[test]
fn with_nothing_set_airflows_defaults_apply_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let conf = conf(&[("AIRFLOW_HOME", home)]);
    assert_eq!(conf.file(), None);
    let db = conf.get(&SQL_ALCHEMY_CONN, None).unwrap();
    assert_eq!(db.value, format!("sqlite:///{home}/airflow.db"));
    assert_eq!(
        db.source.to_string(),
        "Airflow's default for [database] sql_alchemy_conn"
    );
}

#[test]
fn a_deprecated_name_is_read_after_the_new_one() {
    let conf = conf(&[
        ("HOME", "/nonexistent"),
        ("AIRFLOW__CORE__SQL_ALCHEMY_CONN", "postgresql://old/db"),
    ]);
    let db = conf.get(&SQL_ALCHEMY_CONN, None).unwrap();
    assert_eq!(db.value, "postgresql://old/db");
    assert_eq!(
        db.source,
        Source::Variable("AIRFLOW__CORE__SQL_ALCHEMY_CONN".into())
    );
}

#[test]
fn a_secret_option_is_refused_with_the_variable_named() {
    let conf = conf(&[
        ("HOME", "/nonexistent"),
        ("AIRFLOW__CELERY__BROKER_URL_SECRET", "celery/broker"),
    ]);
    let err = conf.get(&BROKER_URL, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration in environment variable AIRFLOW__CELERY__BROKER_URL_SECRET: \
         it names a secret of Airflow's secrets backend, which Overseer does not run: set the \
         option itself, or its _CMD, instead"
    );
}
