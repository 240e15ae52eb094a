use super::*;

#[test]
fn a_base_environment_replaces_this_processs_and_the_rest_goes_on_top() {
    let mut spec = SpawnSpec::shell("true", SessionMarker::new("t", "sh-1"));
    spec.base_env = Some(vec![("A".into(), "1".into()), ("TERM".into(), "dumb".into())]);
    spec.env = vec![("B".into(), "2".into()), ("A".into(), "3".into())];
    let pairs = |env: Vec<(OsString, OsString)>| {
        env.into_iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect::<Vec<_>>()
    };
    let marker = format!("{MARKER_ENV}={}", spec.marker.value());
    assert_eq!(pairs(child_env(&spec, false)), ["A=3", "TERM=dumb", "B=2", marker.as_str()]);
    // A terminal's TERM is ours unless the request's own variables set it, as without a base.
    let tty = format!("TERM={DEFAULT_TERM}");
    assert_eq!(pairs(child_env(&spec, true)), ["A=3", tty.as_str(), "B=2", marker.as_str()]);
    spec.base_env = Some(Vec::new());
    assert_eq!(pairs(child_env(&spec, false)), ["B=2", "A=3", marker.as_str()]);
}
