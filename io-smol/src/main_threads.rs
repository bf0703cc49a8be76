//! `baesrv-threads`: `baesrv` on plain std threads instead of smol (see
//! `io_smol::threads`). Same flags, environment, configuration and database.

fn main() {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    std::process::exit(io_smol::app::main_with_runtime(
        &args,
        io_smol::threads::run,
    ));
}
