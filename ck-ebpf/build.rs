//! Rebuild the program when `bpf-linker` changes: the BPF target links with it, and cargo does
//! not know that on its own.
fn main() {
    match which::which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(_) => {
            println!("cargo:warning=bpf-linker not found; run `cargo xtask build` to install it")
        }
    }
}
