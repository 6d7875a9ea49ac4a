//! Readiness for profiling: when has the program started?
//!
//! The same syntax as `coldstart measure --ready`, for the signals a profiler can watch
//! without disturbing the program: `exit`, `stdout:REGEX` and `stderr:REGEX`.

use regex::Regex;

/// When profiling stops.
#[derive(Debug, Clone)]
pub enum Ready {
    /// The program (the root process) exits.
    Exit,
    /// A line of the program's standard output matches.
    Stdout(Regex),
    /// A line of the program's standard error matches.
    Stderr(Regex),
}

/// A readiness signal that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadyError {
    #[error(
        "bad readiness signal `{spec}`: {message}; use `exit`, `stdout:REGEX` or `stderr:REGEX`"
    )]
    Bad { spec: String, message: String },
}

impl Ready {
    /// Parse `exit`, `stdout:REGEX` or `stderr:REGEX`.
    pub fn parse(spec: &str) -> Result<Ready, ReadyError> {
        let bad = |message: String| ReadyError::Bad { spec: spec.to_owned(), message };
        if spec == "exit" {
            return Ok(Ready::Exit);
        }
        let (kind, pattern) = spec.split_once(':').ok_or_else(|| bad("unknown signal".into()))?;
        let regex = || Regex::new(pattern).map_err(|e| bad(format!("invalid regex: {e}")));
        match kind {
            "stdout" => Ok(Ready::Stdout(regex()?)),
            "stderr" => Ok(Ready::Stderr(regex()?)),
            other => Err(bad(format!("`{other}` is not supported by `profile`"))),
        }
    }
}

impl std::fmt::Display for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ready::Exit => f.write_str("exit"),
            Ready::Stdout(r) => write!(f, "stdout:{r}"),
            Ready::Stderr(r) => write!(f, "stderr:{r}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Ready;

    #[test]
    fn parses_the_measure_syntax() {
        assert!(matches!(Ready::parse("exit").unwrap(), Ready::Exit));
        assert!(matches!(Ready::parse("stdout:^ready$").unwrap(), Ready::Stdout(_)));
        assert_eq!(Ready::parse("stderr:a:b").unwrap().to_string(), "stderr:a:b");
        assert!(Ready::parse("tcp:80").unwrap_err().to_string().contains("not supported"));
        assert!(Ready::parse("stdout:(").unwrap_err().to_string().contains("invalid regex"));
    }
}
