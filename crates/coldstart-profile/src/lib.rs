//! First-touch profiling of start-up without recompiling the program.
