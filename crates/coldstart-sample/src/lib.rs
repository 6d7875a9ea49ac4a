//! Generator for the sample program: C sources for a program whose start-up behaves like a large real one.
