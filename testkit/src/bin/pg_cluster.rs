//! `pg_cluster start DIR` creates and starts a throwaway PostgreSQL test
//! cluster in DIR and prints `BAE_TEST_PG_ADMIN_URL=…` for the end-to-end
//! pass against PostgreSQL; `pg_cluster stop DIR` stops it (testkit::pg).
//! `start-durable` keeps `fsync` on (for benchmarks) and also prints the
//! application role's URL of a fresh database, `BAE_DATABASE_URL=…`.

use std::path::Path;

use testkit::pg::PgCluster;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, dir] if cmd == "start" => {
            let cluster = PgCluster::init_in(Path::new(dir));
            println!("BAE_TEST_PG_ADMIN_URL={}", cluster.admin_url("postgres"));
            // The cluster outlives this process until `stop`.
            std::mem::forget(cluster);
        }
        [cmd, dir] if cmd == "start-durable" => {
            let cluster = PgCluster::init_durable_in(Path::new(dir));
            println!("BAE_TEST_PG_ADMIN_URL={}", cluster.admin_url("postgres"));
            println!(
                "BAE_DATABASE_URL={}",
                cluster.app_url(&cluster.create_database())
            );
            std::mem::forget(cluster);
        }
        [cmd, dir] if cmd == "stop" => PgCluster::stop_dir(Path::new(dir)),
        _ => {
            eprintln!("usage: pg_cluster start|start-durable|stop DIR");
            std::process::exit(2);
        }
    }
}
