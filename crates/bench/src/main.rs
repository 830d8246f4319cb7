//! `overseer-bench`: the benchmark report (work in progress).

fn main() {
    println!("overseer-bench: no scenario yet");
}
