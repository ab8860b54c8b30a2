//! Empty library target: it lets `ck-userspace` name this crate as a build dependency so cargo
//! rebuilds the program when it changes. The program itself is `src/main.rs`.
#![no_std]
