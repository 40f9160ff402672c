fn main() {
    std::process::exit(airlock::cli::main());
}
