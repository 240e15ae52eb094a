//! The `stockade` binary: a thin door onto the engine.

fn main() {
    println!("stockade: under construction");
}
