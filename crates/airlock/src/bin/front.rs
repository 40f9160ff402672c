//! `airlock`: the small front (see `airlock_client::front`).

fn main() {
    std::process::exit(airlock_client::front::main());
}
