//! WASI 0.2.0-rc-2023-10-18: the pre-release WASI packages that Spin 2.0's SDKs build
//! against. A spin-sdk 2.x module imports `wasi:http/types`, `wasi:io/streams` and friends
//! at that version and exports `wasi:http/incoming-handler@0.2.0-rc-2023-10-18`; Spin links
//! them to this day, so we do too.
//!
//! Nothing here has state of its own: every function forwards to wasmtime-wasi's (and
//! wasmtime-wasi-http's) WASI 0.2 implementation, on the very same resources (the
//! snapshot's resource types are mapped to 0.2's), converting the records, enums and flags
//! whose shape changed. Functions 0.2 dropped answer the snapshot's "unsupported" error
//! rather than trapping. UDP is the one place with state of its own: the snapshot's
//! `send`/`receive` on the socket are served through 0.2's datagram streams.
//!
//! - [`add_to_linker`] links every interface of `wasi:cli/reactor@0.2.0-rc-2023-10-18`
//!   and `wasi:http/types`, `wasi:http/outgoing-handler` of the snapshot (outbound HTTP
//!   goes through the same hooks, so the same `allowed_outbound_hosts` check).
//! - [`http::ProxyPre`] calls a component's snapshot `incoming-handler` with 0.2's request
//!   and response-outparam resources, so the HTTP server serves it like any 0.2 handler.

pub(crate) mod http;

mod filesystem;
mod sockets;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliCtxView, WasiCliView as _};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksCtxView, WasiClocksView as _};
use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView as _};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::random::{WasiRandom, WasiRandomCtx, WasiRandomView as _};
use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView as _};
use wasmtime_wasi::{TrappableError, WasiView};
use wasmtime_wasi_http::WasiHttpView;

/// The package version of the snapshot, as it appears in import names.
pub const VERSION: &str = "0.2.0-rc-2023-10-18";

/// Every interface of the snapshot that [`add_to_linker`] links (without the version).
pub const INTERFACES: &[&str] = &[
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:clocks/timezone",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/ip-name-lookup",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:http/types",
    "wasi:http/outgoing-handler",
];

/// Whether `name` (an import, with version) is a snapshot interface this module links.
pub fn provides(name: &str) -> bool {
    name.split_once('@')
        .is_some_and(|(path, version)| version == VERSION && INTERFACES.contains(&path))
}

/// WASI 0.2 as wasmtime-wasi binds it (async where it blocks).
mod latest {
    pub use wasmtime_wasi::p2::bindings::*;
}

/// Bindings of `wasi:cli/reactor@0.2.0-rc-2023-10-18` (io, clocks, random, filesystem,
/// sockets, cli), generated from the snapshot's WIT in spin-sdk's `wit/deps`.
#[allow(missing_docs, clippy::all)]
mod bindings {
    pub use super::sockets::UdpSocket;

    macro_rules! wasi_rc_bindgen {
        ($path:tt) => {
            wasmtime::component::bindgen!({
                path: $path,
                world: "wasi:cli/reactor@0.2.0-rc-2023-10-18",
                // Async exactly where 0.2's implementation is (it may block).
                imports: {
                    "wasi:io/poll.poll-list": async | trappable,
                    "wasi:io/poll.poll-one": async | trappable,
                    "wasi:io/streams.[method]input-stream.blocking-read": async | trappable,
                    "wasi:io/streams.[method]input-stream.blocking-skip": async | trappable,
                    "wasi:io/streams.[drop]input-stream": async | trappable,
                    "wasi:io/streams.[method]output-stream.blocking-write-and-flush": async | trappable,
                    "wasi:io/streams.[method]output-stream.blocking-flush": async | trappable,
                    "wasi:io/streams.[method]output-stream.blocking-write-zeroes-and-flush": async | trappable,
                    "wasi:io/streams.[method]output-stream.blocking-splice": async | trappable,
                    "wasi:io/streams.[method]output-stream.forward": async | trappable,
                    "wasi:io/streams.[drop]output-stream": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.advise": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.sync-data": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.get-flags": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.get-type": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.set-size": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.set-times": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.read": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.write": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.read-directory": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.sync": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.create-directory-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.stat": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.stat-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.set-times-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.link-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.open-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.readlink-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.remove-directory-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.rename-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.symlink-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.access-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.unlink-file-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.change-file-permissions-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.change-directory-permissions-at": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.lock-shared": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.lock-exclusive": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.try-lock-shared": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.try-lock-exclusive": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.unlock": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.is-same-object": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.metadata-hash": async | trappable,
                    "wasi:filesystem/types.[method]descriptor.metadata-hash-at": async | trappable,
                    "wasi:filesystem/types.[method]directory-entry-stream.read-directory-entry": async | trappable,
                    "wasi:sockets/tcp.[method]tcp-socket.start-bind": async | trappable,
                    "wasi:sockets/tcp.[method]tcp-socket.start-listen": async | trappable,
                    "wasi:sockets/udp-create-socket.create-udp-socket": async | trappable,
                    "wasi:sockets/udp.[method]udp-socket.start-bind": async | trappable,
                    "wasi:sockets/udp.[method]udp-socket.finish-connect": async | trappable,
                    "wasi:sockets/udp.[method]udp-socket.receive": async | trappable,
                    "wasi:sockets/udp.[method]udp-socket.send": async | trappable,
                    "wasi:sockets/udp.[drop]udp-socket": async | trappable,
                    default: trappable,
                },
                with: {
                    "wasi:io/poll.pollable": wasmtime_wasi::p2::DynPollable,
                    "wasi:io/streams.input-stream": wasmtime_wasi::p2::DynInputStream,
                    "wasi:io/streams.output-stream": wasmtime_wasi::p2::DynOutputStream,
                    "wasi:io/streams.error": wasmtime::Error,
                    "wasi:filesystem/types.descriptor": wasmtime_wasi::filesystem::Descriptor,
                    "wasi:filesystem/types.directory-entry-stream": wasmtime_wasi::p2::ReaddirIterator,
                    "wasi:cli/terminal-input.terminal-input": super::latest::cli::terminal_input::TerminalInput,
                    "wasi:cli/terminal-output.terminal-output": super::latest::cli::terminal_output::TerminalOutput,
                    "wasi:sockets/network.network": wasmtime_wasi::p2::Network,
                    "wasi:sockets/tcp.tcp-socket": wasmtime_wasi::p2::TcpSocket,
                    "wasi:sockets/udp.udp-socket": UdpSocket,
                    "wasi:sockets/ip-name-lookup.resolve-address-stream": super::latest::sockets::ip_name_lookup::ResolveAddressStream,
                },
            });
        };
    }
    include!(concat!(env!("OUT_DIR"), "/wasi_rc_bindings.rs"));
}

/// The snapshot's interfaces under short names.
mod rc {
    pub use super::bindings::wasi::{
        cli0_2_0_rc_2023_10_18 as cli, clocks0_2_0_rc_2023_10_18 as clocks,
        filesystem0_2_0_rc_2023_10_18 as filesystem, io0_2_0_rc_2023_10_18 as io,
        random0_2_0_rc_2023_10_18 as random, sockets0_2_0_rc_2023_10_18 as sockets,
    };
}

/// `HasData` for the io interfaces: they need only the resource table.
struct Io;

impl HasData for Io {
    type Data<'a> = &'a mut ResourceTable;
}

/// Links every interface of the snapshot's `wasi:cli/reactor` world and its
/// `wasi:http/types` and `wasi:http/outgoing-handler` into `linker`, beside WASI 0.2, for
/// any store data that gives WASI and WASI HTTP views.
pub fn add_to_linker<T: WasiView + WasiHttpView + 'static>(
    linker: &mut Linker<T>,
) -> anyhow::Result<()> {
    let l = linker;
    rc::io::poll::add_to_linker::<_, Io>(l, |t| t.ctx().table)?;
    rc::io::streams::add_to_linker::<_, Io>(l, |t| t.ctx().table)?;
    rc::clocks::monotonic_clock::add_to_linker::<_, WasiClocks>(l, |t| t.clocks())?;
    rc::clocks::wall_clock::add_to_linker::<_, WasiClocks>(l, |t| t.clocks())?;
    rc::clocks::timezone::add_to_linker::<_, WasiClocks>(l, |t| t.clocks())?;
    rc::random::random::add_to_linker::<_, WasiRandom>(l, |t| t.random())?;
    rc::random::insecure::add_to_linker::<_, WasiRandom>(l, |t| t.random())?;
    rc::random::insecure_seed::add_to_linker::<_, WasiRandom>(l, |t| t.random())?;
    rc::cli::environment::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::cli::exit::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::cli::stdin::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::cli::stdout::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::cli::stderr::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::cli::terminal_input::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::cli::terminal_output::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::cli::terminal_stdin::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::cli::terminal_stdout::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::cli::terminal_stderr::add_to_linker::<_, WasiCli>(l, |t| t.cli())?;
    rc::filesystem::types::add_to_linker::<_, WasiFilesystem>(l, |t| t.filesystem())?;
    rc::filesystem::preopens::add_to_linker::<_, WasiFilesystem>(l, |t| t.filesystem())?;
    rc::sockets::network::add_to_linker::<_, WasiSockets>(l, |t| t.sockets())?;
    rc::sockets::instance_network::add_to_linker::<_, WasiSockets>(l, |t| t.sockets())?;
    rc::sockets::ip_name_lookup::add_to_linker::<_, WasiSockets>(l, |t| t.sockets())?;
    rc::sockets::tcp::add_to_linker::<_, WasiSockets>(l, |t| t.sockets())?;
    rc::sockets::tcp_create_socket::add_to_linker::<_, WasiSockets>(l, |t| t.sockets())?;
    rc::sockets::udp::add_to_linker::<_, WasiSockets>(l, |t| t.sockets())?;
    rc::sockets::udp_create_socket::add_to_linker::<_, WasiSockets>(l, |t| t.sockets())?;
    http::add_to_linker(l)?;
    Ok(())
}

/// A 0.2 result whose error is a `TrappableError` (an error code, or a trap) as the
/// snapshot's result: the code converted, a trap kept a trap.
fn conv<T, U, E, F>(r: Result<T, TrappableError<E>>) -> wasmtime::Result<Result<U, F>>
where
    U: From<T>,
    E: std::error::Error + Send + Sync + 'static,
    F: From<E>,
{
    match r {
        Ok(v) => Ok(Ok(v.into())),
        Err(e) => Ok(Err(e.downcast()?.into())),
    }
}

/// A 0.2 stream result as the snapshot's: a failure becomes an `error` resource.
fn conv_stream<T, U>(
    table: &mut ResourceTable,
    r: Result<T, wasmtime_wasi::p2::StreamError>,
) -> wasmtime::Result<Result<U, rc::io::streams::StreamError>>
where
    U: From<T>,
{
    use rc::io::streams::StreamError as Rc;
    use wasmtime_wasi::p2::StreamError as Latest;
    match r {
        Ok(v) => Ok(Ok(v.into())),
        Err(Latest::Closed) => Ok(Err(Rc::Closed)),
        Err(Latest::LastOperationFailed(e)) => Ok(Err(Rc::LastOperationFailed(table.push(e)?))),
        Err(Latest::Trap(e)) => Err(e),
    }
}

/// `From` impls between the snapshot's and 0.2's types of the same shape: enums (and
/// variants with one payload) by variant name, records by field name, flags by flag name.
/// `<=>` writes both directions.
macro_rules! convert {
    () => {};
    ($kind:ident $a:path [<=>] $b:path { $($body:tt)* } $($rest:tt)*) => {
        $crate::wasi_rc::convert!($kind $a => $b { $($body)* });
        $crate::wasi_rc::convert!($kind $b => $a { $($body)* });
        $crate::wasi_rc::convert!($($rest)*);
    };
    (enum $from:path => $to:path { $($v:ident $(($x:ident))?),* $(,)? } $($rest:tt)*) => {
        impl From<$from> for $to {
            fn from(e: $from) -> $to {
                use $from as A;
                use $to as B;
                match e {
                    $(A::$v $(($x))? => B::$v $(($x.into()))?,)*
                }
            }
        }
        $crate::wasi_rc::convert!($($rest)*);
    };
    (struct $from:path => $to:path { $($f:ident),* $(,)? } $($rest:tt)*) => {
        impl From<$from> for $to {
            fn from(e: $from) -> $to {
                $to { $($f: e.$f.into(),)* }
            }
        }
        $crate::wasi_rc::convert!($($rest)*);
    };
    (flags $from:path => $to:path { $($f:ident),* $(,)? } $($rest:tt)*) => {
        impl From<$from> for $to {
            fn from(e: $from) -> $to {
                use $from as A;
                use $to as B;
                let mut out = B::empty();
                $(if e.contains(A::$f) { out |= B::$f; })*
                out
            }
        }
        $crate::wasi_rc::convert!($($rest)*);
    };
}
pub(crate) use convert;

convert! {
    struct latest::clocks::wall_clock::Datetime [<=>] rc::clocks::wall_clock::Datetime {
        seconds, nanoseconds,
    }
}

impl rc::io::poll::Host for ResourceTable {
    async fn poll_list(&mut self, list: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        latest::io::poll::Host::poll(self, list).await
    }

    async fn poll_one(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        latest::io::poll::HostPollable::block(self, pollable).await
    }
}

impl rc::io::poll::HostPollable for ResourceTable {
    fn drop(&mut self, rep: Resource<DynPollable>) -> wasmtime::Result<()> {
        latest::io::poll::HostPollable::drop(self, rep)
    }
}

impl rc::io::streams::Host for ResourceTable {}

impl rc::io::streams::HostError for ResourceTable {
    fn to_debug_string(&mut self, e: Resource<wasmtime::Error>) -> wasmtime::Result<String> {
        latest::io::error::HostError::to_debug_string(self, e)
    }

    fn drop(&mut self, rep: Resource<wasmtime::Error>) -> wasmtime::Result<()> {
        latest::io::error::HostError::drop(self, rep)
    }
}

type In = wasmtime_wasi::p2::DynInputStream;
type Out = wasmtime_wasi::p2::DynOutputStream;
type StreamResult<T> = wasmtime::Result<Result<T, rc::io::streams::StreamError>>;

impl rc::io::streams::HostInputStream for ResourceTable {
    fn read(&mut self, s: Resource<In>, len: u64) -> StreamResult<Vec<u8>> {
        let r = latest::io::streams::HostInputStream::read(self, s, len);
        conv_stream(self, r)
    }

    async fn blocking_read(&mut self, s: Resource<In>, len: u64) -> StreamResult<Vec<u8>> {
        let r = latest::io::streams::HostInputStream::blocking_read(self, s, len).await;
        conv_stream(self, r)
    }

    fn skip(&mut self, s: Resource<In>, len: u64) -> StreamResult<u64> {
        let r = latest::io::streams::HostInputStream::skip(self, s, len);
        conv_stream(self, r)
    }

    async fn blocking_skip(&mut self, s: Resource<In>, len: u64) -> StreamResult<u64> {
        let r = latest::io::streams::HostInputStream::blocking_skip(self, s, len).await;
        conv_stream(self, r)
    }

    fn subscribe(&mut self, s: Resource<In>) -> wasmtime::Result<Resource<DynPollable>> {
        latest::io::streams::HostInputStream::subscribe(self, s)
    }

    async fn drop(&mut self, rep: Resource<In>) -> wasmtime::Result<()> {
        latest::io::streams::HostInputStream::drop(self, rep).await
    }
}

impl rc::io::streams::HostOutputStream for ResourceTable {
    fn check_write(&mut self, s: Resource<Out>) -> StreamResult<u64> {
        let r = latest::io::streams::HostOutputStream::check_write(self, s);
        conv_stream(self, r)
    }

    fn write(&mut self, s: Resource<Out>, contents: Vec<u8>) -> StreamResult<()> {
        let r = latest::io::streams::HostOutputStream::write(self, s, contents);
        conv_stream(self, r)
    }

    async fn blocking_write_and_flush(
        &mut self,
        s: Resource<Out>,
        contents: Vec<u8>,
    ) -> StreamResult<()> {
        let r = latest::io::streams::HostOutputStream::blocking_write_and_flush(self, s, contents)
            .await;
        conv_stream(self, r)
    }

    fn flush(&mut self, s: Resource<Out>) -> StreamResult<()> {
        let r = latest::io::streams::HostOutputStream::flush(self, s);
        conv_stream(self, r)
    }

    async fn blocking_flush(&mut self, s: Resource<Out>) -> StreamResult<()> {
        let r = latest::io::streams::HostOutputStream::blocking_flush(self, s).await;
        conv_stream(self, r)
    }

    fn subscribe(&mut self, s: Resource<Out>) -> wasmtime::Result<Resource<DynPollable>> {
        latest::io::streams::HostOutputStream::subscribe(self, s)
    }

    fn write_zeroes(&mut self, s: Resource<Out>, len: u64) -> StreamResult<()> {
        let r = latest::io::streams::HostOutputStream::write_zeroes(self, s, len);
        conv_stream(self, r)
    }

    async fn blocking_write_zeroes_and_flush(
        &mut self,
        s: Resource<Out>,
        len: u64,
    ) -> StreamResult<()> {
        let r =
            latest::io::streams::HostOutputStream::blocking_write_zeroes_and_flush(self, s, len)
                .await;
        conv_stream(self, r)
    }

    fn splice(&mut self, s: Resource<Out>, src: Resource<In>, len: u64) -> StreamResult<u64> {
        let r = latest::io::streams::HostOutputStream::splice(self, s, src, len);
        conv_stream(self, r)
    }

    async fn blocking_splice(
        &mut self,
        s: Resource<Out>,
        src: Resource<In>,
        len: u64,
    ) -> StreamResult<u64> {
        let r = latest::io::streams::HostOutputStream::blocking_splice(self, s, src, len).await;
        conv_stream(self, r)
    }

    /// Gone from 0.2: splices until the source ends, as the snapshot specifies.
    async fn forward(&mut self, s: Resource<Out>, src: Resource<In>) -> StreamResult<u64> {
        let mut total = 0u64;
        loop {
            let dst = Resource::new_borrow(s.rep());
            let from = Resource::new_borrow(src.rep());
            match latest::io::streams::HostOutputStream::blocking_splice(self, dst, from, 64 * 1024)
                .await
            {
                Ok(n) => total += n,
                Err(wasmtime_wasi::p2::StreamError::Closed) => return Ok(Ok(total)),
                Err(e) => return conv_stream::<u64, u64>(self, Err(e)),
            }
        }
    }

    async fn drop(&mut self, rep: Resource<Out>) -> wasmtime::Result<()> {
        latest::io::streams::HostOutputStream::drop(self, rep).await
    }
}

impl rc::clocks::monotonic_clock::Host for WasiClocksCtxView<'_> {
    fn now(&mut self) -> wasmtime::Result<u64> {
        latest::clocks::monotonic_clock::Host::now(self)
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        latest::clocks::monotonic_clock::Host::resolution(self)
    }

    fn subscribe(&mut self, when: u64, absolute: bool) -> wasmtime::Result<Resource<DynPollable>> {
        if absolute {
            latest::clocks::monotonic_clock::Host::subscribe_instant(self, when)
        } else {
            latest::clocks::monotonic_clock::Host::subscribe_duration(self, when)
        }
    }
}

impl rc::clocks::wall_clock::Host for WasiClocksCtxView<'_> {
    fn now(&mut self) -> wasmtime::Result<rc::clocks::wall_clock::Datetime> {
        Ok(latest::clocks::wall_clock::Host::now(self)?.into())
    }

    fn resolution(&mut self) -> wasmtime::Result<rc::clocks::wall_clock::Datetime> {
        Ok(latest::clocks::wall_clock::Host::resolution(self)?.into())
    }
}

/// The snapshot's timezone interface (dropped from 0.2): the host runs on UTC, as a
/// container without a zoneinfo does.
impl rc::clocks::timezone::Host for WasiClocksCtxView<'_> {
    fn display(
        &mut self,
        _when: rc::clocks::wall_clock::Datetime,
    ) -> wasmtime::Result<rc::clocks::timezone::TimezoneDisplay> {
        Ok(rc::clocks::timezone::TimezoneDisplay {
            utc_offset: 0,
            name: "UTC".to_string(),
            in_daylight_saving_time: false,
        })
    }

    fn utc_offset(&mut self, _when: rc::clocks::wall_clock::Datetime) -> wasmtime::Result<i32> {
        Ok(0)
    }
}

impl rc::random::random::Host for WasiRandomCtx {
    fn get_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        latest::random::random::Host::get_random_bytes(self, len)
    }

    fn get_random_u64(&mut self) -> wasmtime::Result<u64> {
        latest::random::random::Host::get_random_u64(self)
    }
}

impl rc::random::insecure::Host for WasiRandomCtx {
    fn get_insecure_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        latest::random::insecure::Host::get_insecure_random_bytes(self, len)
    }

    fn get_insecure_random_u64(&mut self) -> wasmtime::Result<u64> {
        latest::random::insecure::Host::get_insecure_random_u64(self)
    }
}

impl rc::random::insecure_seed::Host for WasiRandomCtx {
    fn insecure_seed(&mut self) -> wasmtime::Result<(u64, u64)> {
        latest::random::insecure_seed::Host::insecure_seed(self)
    }
}

impl rc::cli::environment::Host for WasiCliCtxView<'_> {
    fn get_environment(&mut self) -> wasmtime::Result<Vec<(String, String)>> {
        latest::cli::environment::Host::get_environment(self)
    }

    fn get_arguments(&mut self) -> wasmtime::Result<Vec<String>> {
        latest::cli::environment::Host::get_arguments(self)
    }

    fn initial_cwd(&mut self) -> wasmtime::Result<Option<String>> {
        latest::cli::environment::Host::initial_cwd(self)
    }
}

impl rc::cli::exit::Host for WasiCliCtxView<'_> {
    fn exit(&mut self, status: Result<(), ()>) -> wasmtime::Result<()> {
        latest::cli::exit::Host::exit(self, status)
    }
}

impl rc::cli::stdin::Host for WasiCliCtxView<'_> {
    fn get_stdin(&mut self) -> wasmtime::Result<Resource<In>> {
        latest::cli::stdin::Host::get_stdin(self)
    }
}

impl rc::cli::stdout::Host for WasiCliCtxView<'_> {
    fn get_stdout(&mut self) -> wasmtime::Result<Resource<Out>> {
        latest::cli::stdout::Host::get_stdout(self)
    }
}

impl rc::cli::stderr::Host for WasiCliCtxView<'_> {
    fn get_stderr(&mut self) -> wasmtime::Result<Resource<Out>> {
        latest::cli::stderr::Host::get_stderr(self)
    }
}

type TerminalInput = latest::cli::terminal_input::TerminalInput;
type TerminalOutput = latest::cli::terminal_output::TerminalOutput;

impl rc::cli::terminal_input::Host for WasiCliCtxView<'_> {}

impl rc::cli::terminal_input::HostTerminalInput for WasiCliCtxView<'_> {
    fn drop(&mut self, rep: Resource<TerminalInput>) -> wasmtime::Result<()> {
        latest::cli::terminal_input::HostTerminalInput::drop(self, rep)
    }
}

impl rc::cli::terminal_output::Host for WasiCliCtxView<'_> {}

impl rc::cli::terminal_output::HostTerminalOutput for WasiCliCtxView<'_> {
    fn drop(&mut self, rep: Resource<TerminalOutput>) -> wasmtime::Result<()> {
        latest::cli::terminal_output::HostTerminalOutput::drop(self, rep)
    }
}

impl rc::cli::terminal_stdin::Host for WasiCliCtxView<'_> {
    fn get_terminal_stdin(&mut self) -> wasmtime::Result<Option<Resource<TerminalInput>>> {
        latest::cli::terminal_stdin::Host::get_terminal_stdin(self)
    }
}

impl rc::cli::terminal_stdout::Host for WasiCliCtxView<'_> {
    fn get_terminal_stdout(&mut self) -> wasmtime::Result<Option<Resource<TerminalOutput>>> {
        latest::cli::terminal_stdout::Host::get_terminal_stdout(self)
    }
}

impl rc::cli::terminal_stderr::Host for WasiCliCtxView<'_> {
    fn get_terminal_stderr(&mut self) -> wasmtime::Result<Option<Resource<TerminalOutput>>> {
        latest::cli::terminal_stderr::Host::get_terminal_stderr(self)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn provides_exactly_the_snapshot() {
        assert!(super::provides("wasi:io/streams@0.2.0-rc-2023-10-18"));
        assert!(super::provides("wasi:sockets/udp@0.2.0-rc-2023-10-18"));
        assert!(!super::provides("wasi:io/streams@0.2.0-rc-2023-11-10"));
        assert!(!super::provides("wasi:io/error@0.2.0-rc-2023-10-18"));
        assert!(!super::provides("wasi:io/streams"));
    }
}
