//! One line for an error and its causes, as the tools print it.
//!
//! Several error types (ours and std's wrappers) put their source's text in their own
//! message *and* return it as `source()`, so anyhow's `{:#}` would print the OS error
//! twice ("cannot connect to …: No such file or directory (os error 2): No such file or
//! directory (os error 2)"). Invariant: each cause's text is added only when the line
//! does not already hold it; nothing that is not already on the line is dropped.

/// The error and its causes joined by ": ", each text once.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot connect to /x: {source}")]
    struct Connect {
        source: std::io::Error,
    }

    #[test]
    fn the_os_error_is_printed_once() {
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let e = anyhow::Error::new(Connect { source: io });
        assert_eq!(
            error_line(&e),
            "cannot connect to /x: No such file or directory (os error 2)"
        );
        let e = Err::<(), _>(std::io::Error::from_raw_os_error(libc::EACCES))
            .context("open /dev/sdb")
            .unwrap_err();
        assert_eq!(
            error_line(&e),
            "open /dev/sdb: Permission denied (os error 13)"
        );
    }
}
