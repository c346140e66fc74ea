//! SDK proof app built against spin-sdk 2.x (see ../../sdk-common/handler.rs), plus `/wasi`:
//! spin-sdk 2 binds the WASI 0.2.0-rc-2023-10-18 interfaces of its world directly
//! (`spin_sdk::wit::wasi`), and `/wasi` calls clocks, timezone, random, cli, filesystem and
//! sockets through them, so the runtime must link and serve each snapshot interface.
const SDK: &str = "2";
include!("../../sdk-common/handler.rs");

fn extra_route(route: &str) -> Option<(u16, String)> {
    (route == "/wasi").then(|| match wasi_probe() {
        Ok(report) => (200, format!("sdk={SDK} route=/wasi {report}\n")),
        Err(e) => (500, format!("sdk={SDK} route=/wasi failed: {e}\n")),
    })
}

fn wasi_probe() -> Result<String, String> {
    use spin_sdk::wit::wasi::{cli, clocks, filesystem, random, sockets};

    let now = clocks::wall_clock::now();
    let start = clocks::monotonic_clock::now();
    let offset = clocks::timezone::utc_offset(now);
    let bytes = random::random::get_random_bytes(16);
    let _ = random::insecure_seed::insecure_seed();
    let env = cli::environment::get_environment();

    // The `files` mount of spin.toml is a preopen; read hello.txt through it.
    let dirs = filesystem::preopens::get_directories();
    let (dir, _) = dirs
        .iter()
        .find(|(_, path)| path == "/static")
        .ok_or_else(|| {
            let names: Vec<&String> = dirs.iter().map(|(_, p)| p).collect();
            format!("no /static preopen among {names:?}")
        })?;
    use filesystem::types::{DescriptorFlags, Modes, OpenFlags, PathFlags};
    let file = dir
        .open_at(
            PathFlags::empty(),
            "hello.txt",
            OpenFlags::empty(),
            DescriptorFlags::READ,
            Modes::READABLE,
        )
        .map_err(|e| format!("open-at hello.txt: {e:?}"))?;
    let (data, _eof) = file.read(1024, 0).map_err(|e| format!("read: {e:?}"))?;
    let size = file.stat().map_err(|e| format!("stat: {e:?}"))?.size;

    // The runtime allows no socket destination: creating or connecting must be refused.
    use sockets::network::{IpAddressFamily, IpSocketAddress, Ipv4SocketAddress};
    let network = sockets::instance_network::instance_network();
    let tcp = match sockets::tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4) {
        Err(e) => format!("create:{}", e.name()),
        Ok(socket) => {
            let target = IpSocketAddress::Ipv4(Ipv4SocketAddress {
                port: 9,
                address: (127, 0, 0, 1),
            });
            match socket.start_connect(&network, target) {
                Ok(()) => "connect:allowed".to_string(),
                Err(e) => format!("connect:{}", e.name()),
            }
        }
    };

    let elapsed = clocks::monotonic_clock::now() >= start;
    Ok(format!(
        "wall_clock_after_2020={} monotonic={elapsed} utc_offset={offset} random_bytes={} \
         env_vars={} file_size={size} file={:?} tcp={tcp}",
        now.seconds > 1_577_836_800,
        bytes.len(),
        env.len(),
        String::from_utf8_lossy(&data).trim_end(),
    ))
}
