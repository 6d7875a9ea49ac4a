//! What kind of failure an error is, so that the command line maps it to an exit code in one
//! place.
//!
//! Every library error type of coldstart has a `category()` method with an exhaustive match
//! over its variants: a new variant cannot be added without deciding what it means to the
//! user. The binary turns the category into an exit code; libraries never exit.
//!
//! ```
//! use coldstart_error::Category;
//!
//! assert_eq!(Category::Usage.exit_code(), 2);
//! assert_eq!(Category::Privilege.exit_code(), 3);
//! assert_eq!(Category::Untrusted.exit_code(), 4);
//! ```

/// The kind of a failure, as the user must act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// Bad input: a flag, a file, a URL or a command that cannot be used. Fix the input.
    Usage,
    /// A missing privilege or kernel feature (root, CAP_SYS_ADMIN, ptrace, perf). Run with it,
    /// or choose an option that does not need it.
    Privilege,
    /// The machine or the network failed while the work ran (a full disk, a server that went
    /// away, a tool that crashed). Try again, or fix the machine.
    Environment,
    /// A bundle that is not proved to be its publisher's: `--trust` was given and its
    /// signature is missing, made by another key, or does not match what was fetched. Fix
    /// the origin (or the keys trusted); never retry blindly.
    Untrusted,
    /// A bug in coldstart: an invariant did not hold.
    Internal,
}

impl Category {
    /// The category of a failed file-system call: a permission refused (`EACCES`, `EPERM`) is
    /// a missing privilege, anything else `otherwise`.
    ///
    /// ```
    /// use coldstart_error::Category;
    /// let denied = std::io::Error::from_raw_os_error(13);
    /// assert_eq!(Category::of_io(&denied, Category::Environment), Category::Privilege);
    /// let full = std::io::Error::from_raw_os_error(28);
    /// assert_eq!(Category::of_io(&full, Category::Environment), Category::Environment);
    /// ```
    pub fn of_io(e: &std::io::Error, otherwise: Category) -> Category {
        match e.kind() {
            std::io::ErrorKind::PermissionDenied => Category::Privilege,
            _ => otherwise,
        }
    }

    /// The process exit code of the category (README, "Exit codes"): 2 bad input, 3 a missing
    /// privilege, 4 an untrusted bundle, 70 (`EX_SOFTWARE`) an environmental or internal
    /// error. Code 1 is not an error: the work ran and found a failure.
    pub fn exit_code(self) -> u8 {
        match self {
            Category::Usage => 2,
            Category::Privilege => 3,
            Category::Untrusted => 4,
            Category::Environment | Category::Internal => 70,
        }
    }
}

/// The category of `cause` when it is one of the listed error types, each of which has a
/// `category()` method: how a library says which of its errors it knows, in its
/// `error_category` function, for the binary to map to an exit code.
///
/// ```
/// use coldstart_error::Category;
///
/// #[derive(Debug)]
/// struct Refused;
/// impl std::fmt::Display for Refused {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("refused")
///     }
/// }
/// impl std::error::Error for Refused {}
/// impl Refused {
///     fn category(&self) -> Category {
///         Category::Untrusted
///     }
/// }
///
/// fn error_category(cause: &(dyn std::error::Error + 'static)) -> Option<Category> {
///     coldstart_error::category_of!(cause; Refused)
/// }
/// assert_eq!(error_category(&Refused), Some(Category::Untrusted));
/// assert_eq!(error_category(&std::fmt::Error), None);
/// ```
#[macro_export]
macro_rules! category_of {
    ($cause:expr; $($ty:ty),+ $(,)?) => {{
        let cause: &(dyn ::std::error::Error + 'static) = $cause;
        None$(.or_else(|| cause.downcast_ref::<$ty>().map(|e| e.category())))+
    }};
}
