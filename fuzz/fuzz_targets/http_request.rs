//! A request head as a client sends it to `coldstart serve`: a status, never a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let status = coldstart_serve::request_status(data);
    assert!((200..600).contains(&status));
});
