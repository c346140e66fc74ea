//! `wasi:sockets@0.2.0-rc-2023-10-18` on wasmtime-wasi's 0.2 sockets (the same
//! `WasiCtx` policy: whatever 0.2 refuses, the snapshot is refused too).

use std::mem;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, Network, TcpSocket};
use wasmtime_wasi::sockets::WasiSocketsCtxView;

use super::rc::sockets::{
    instance_network, ip_name_lookup, network, tcp, tcp_create_socket, udp, udp_create_socket,
};
use super::{conv, convert, latest};
use network::{ErrorCode, IpAddress, IpAddressFamily, IpSocketAddress};

use latest::sockets as l;

type SockResult<T> = wasmtime::Result<Result<T, ErrorCode>>;
type ResolveAddressStream = l::ip_name_lookup::ResolveAddressStream;

impl network::Host for WasiSocketsCtxView<'_> {}

impl network::HostNetwork for WasiSocketsCtxView<'_> {
    fn drop(&mut self, rep: Resource<Network>) -> wasmtime::Result<()> {
        l::network::HostNetwork::drop(self, rep)
    }
}

impl instance_network::Host for WasiSocketsCtxView<'_> {
    fn instance_network(&mut self) -> wasmtime::Result<Resource<Network>> {
        l::instance_network::Host::instance_network(self)
    }
}

impl ip_name_lookup::Host for WasiSocketsCtxView<'_> {
    /// The family filter and `include-unavailable` are gone from 0.2: every address the
    /// name resolves to is returned.
    fn resolve_addresses(
        &mut self,
        network: Resource<Network>,
        name: String,
        _family: Option<IpAddressFamily>,
        _include_unavailable: bool,
    ) -> SockResult<Resource<ResolveAddressStream>> {
        conv(l::ip_name_lookup::Host::resolve_addresses(
            self, network, name,
        ))
    }
}

impl ip_name_lookup::HostResolveAddressStream for WasiSocketsCtxView<'_> {
    fn resolve_next_address(
        &mut self,
        stream: Resource<ResolveAddressStream>,
    ) -> SockResult<Option<IpAddress>> {
        conv(
            l::ip_name_lookup::HostResolveAddressStream::resolve_next_address(self, stream)
                .map(|a| a.map(IpAddress::from)),
        )
    }

    fn subscribe(
        &mut self,
        stream: Resource<ResolveAddressStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        l::ip_name_lookup::HostResolveAddressStream::subscribe(self, stream)
    }

    fn drop(&mut self, rep: Resource<ResolveAddressStream>) -> wasmtime::Result<()> {
        l::ip_name_lookup::HostResolveAddressStream::drop(self, rep)
    }
}

impl tcp_create_socket::Host for WasiSocketsCtxView<'_> {
    fn create_tcp_socket(&mut self, family: IpAddressFamily) -> SockResult<Resource<TcpSocket>> {
        conv(l::tcp_create_socket::Host::create_tcp_socket(
            self,
            family.into(),
        ))
    }
}

impl tcp::Host for WasiSocketsCtxView<'_> {}

impl tcp::HostTcpSocket for WasiSocketsCtxView<'_> {
    async fn start_bind(
        &mut self,
        s: Resource<TcpSocket>,
        network: Resource<Network>,
        local: IpSocketAddress,
    ) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::start_bind(self, s, network, local.into()).await)
    }

    fn finish_bind(&mut self, s: Resource<TcpSocket>) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::finish_bind(self, s))
    }

    fn start_connect(
        &mut self,
        s: Resource<TcpSocket>,
        network: Resource<Network>,
        remote: IpSocketAddress,
    ) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::start_connect(
            self,
            s,
            network,
            remote.into(),
        ))
    }

    fn finish_connect(
        &mut self,
        s: Resource<TcpSocket>,
    ) -> SockResult<(Resource<DynInputStream>, Resource<DynOutputStream>)> {
        conv(l::tcp::HostTcpSocket::finish_connect(self, s))
    }

    async fn start_listen(&mut self, s: Resource<TcpSocket>) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::start_listen(self, s).await)
    }

    fn finish_listen(&mut self, s: Resource<TcpSocket>) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::finish_listen(self, s))
    }

    fn accept(
        &mut self,
        s: Resource<TcpSocket>,
    ) -> SockResult<(
        Resource<TcpSocket>,
        Resource<DynInputStream>,
        Resource<DynOutputStream>,
    )> {
        conv(l::tcp::HostTcpSocket::accept(self, s))
    }

    fn local_address(&mut self, s: Resource<TcpSocket>) -> SockResult<IpSocketAddress> {
        conv(l::tcp::HostTcpSocket::local_address(self, s))
    }

    fn remote_address(&mut self, s: Resource<TcpSocket>) -> SockResult<IpSocketAddress> {
        conv(l::tcp::HostTcpSocket::remote_address(self, s))
    }

    fn address_family(&mut self, s: Resource<TcpSocket>) -> wasmtime::Result<IpAddressFamily> {
        Ok(l::tcp::HostTcpSocket::address_family(self, s)?.into())
    }

    /// Gone from 0.2 (sockets are always dual-stack off).
    fn ipv6_only(&mut self, _s: Resource<TcpSocket>) -> SockResult<bool> {
        Ok(Err(ErrorCode::NotSupported))
    }

    fn set_ipv6_only(&mut self, _s: Resource<TcpSocket>, _value: bool) -> SockResult<()> {
        Ok(Err(ErrorCode::NotSupported))
    }

    fn set_listen_backlog_size(&mut self, s: Resource<TcpSocket>, value: u64) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::set_listen_backlog_size(
            self, s, value,
        ))
    }

    fn keep_alive(&mut self, s: Resource<TcpSocket>) -> SockResult<bool> {
        conv(l::tcp::HostTcpSocket::keep_alive_enabled(self, s))
    }

    fn set_keep_alive(&mut self, s: Resource<TcpSocket>, value: bool) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::set_keep_alive_enabled(
            self, s, value,
        ))
    }

    /// Gone from 0.2.
    fn no_delay(&mut self, _s: Resource<TcpSocket>) -> SockResult<bool> {
        Ok(Err(ErrorCode::NotSupported))
    }

    fn set_no_delay(&mut self, _s: Resource<TcpSocket>, _value: bool) -> SockResult<()> {
        Ok(Err(ErrorCode::NotSupported))
    }

    fn unicast_hop_limit(&mut self, s: Resource<TcpSocket>) -> SockResult<u8> {
        conv(l::tcp::HostTcpSocket::hop_limit(self, s))
    }

    fn set_unicast_hop_limit(&mut self, s: Resource<TcpSocket>, value: u8) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::set_hop_limit(self, s, value))
    }

    fn receive_buffer_size(&mut self, s: Resource<TcpSocket>) -> SockResult<u64> {
        conv(l::tcp::HostTcpSocket::receive_buffer_size(self, s))
    }

    fn set_receive_buffer_size(&mut self, s: Resource<TcpSocket>, value: u64) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::set_receive_buffer_size(
            self, s, value,
        ))
    }

    fn send_buffer_size(&mut self, s: Resource<TcpSocket>) -> SockResult<u64> {
        conv(l::tcp::HostTcpSocket::send_buffer_size(self, s))
    }

    fn set_send_buffer_size(&mut self, s: Resource<TcpSocket>, value: u64) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::set_send_buffer_size(self, s, value))
    }

    fn subscribe(&mut self, s: Resource<TcpSocket>) -> wasmtime::Result<Resource<DynPollable>> {
        l::tcp::HostTcpSocket::subscribe(self, s)
    }

    fn shutdown(&mut self, s: Resource<TcpSocket>, how: tcp::ShutdownType) -> SockResult<()> {
        conv(l::tcp::HostTcpSocket::shutdown(self, s, how.into()))
    }

    fn drop(&mut self, rep: Resource<TcpSocket>) -> wasmtime::Result<()> {
        l::tcp::HostTcpSocket::drop(self, rep)
    }
}

type LatestUdp = l::udp::UdpSocket;

/// A snapshot UDP socket. The snapshot sends and receives on the socket itself (with
/// `start-connect`/`finish-connect` fixing the peer); 0.2 does it through a pair of
/// datagram streams that `stream` creates, so the socket keeps the state in between.
pub enum UdpSocket {
    /// Created or bound; no streams yet.
    Initial(Resource<LatestUdp>),
    /// `start-connect` was called with this peer; `finish-connect` opens the streams.
    Connecting(Resource<LatestUdp>, IpSocketAddress),
    /// Streams open (to one peer, or to any when sending/receiving came first).
    Open {
        socket: Resource<LatestUdp>,
        incoming: Resource<l::udp::IncomingDatagramStream>,
        outgoing: Resource<l::udp::OutgoingDatagramStream>,
    },
    /// Only while a transition runs.
    Moving,
}

impl UdpSocket {
    fn inner(&self) -> wasmtime::Result<Resource<LatestUdp>> {
        let r = match self {
            UdpSocket::Initial(s) | UdpSocket::Connecting(s, _) => s,
            UdpSocket::Open { socket, .. } => socket,
            UdpSocket::Moving => wasmtime::bail!("UDP socket used while it changes state"),
        };
        Ok(Resource::new_borrow(r.rep()))
    }
}

/// The 0.2 socket inside a snapshot socket, borrowed.
fn inner(
    v: &mut WasiSocketsCtxView<'_>,
    s: &Resource<UdpSocket>,
) -> wasmtime::Result<Resource<LatestUdp>> {
    v.table.get(s)?.inner()
}

/// Opens the socket's datagram streams: to the peer of a pending `start-connect` when
/// `connect` (from `finish-connect`), else to any peer (the first `send`/`receive` of an
/// unconnected socket). Open sockets stay as they are, except that `finish-connect` needs
/// a pending connect.
async fn open_streams(
    v: &mut WasiSocketsCtxView<'_>,
    s: &Resource<UdpSocket>,
    connect: bool,
) -> SockResult<()> {
    let state = v.table.get_mut(s)?;
    let (socket, peer) = match mem::replace(state, UdpSocket::Moving) {
        UdpSocket::Connecting(socket, peer) if connect => (socket, Some(peer)),
        UdpSocket::Initial(socket) if !connect => (socket, None),
        open @ UdpSocket::Open { .. } if !connect => {
            *state = open;
            return Ok(Ok(()));
        }
        other => {
            *state = other;
            return Ok(Err(if connect {
                ErrorCode::NotInProgress
            } else {
                ErrorCode::InvalidState
            }));
        }
    };
    let borrowed = Resource::new_borrow(socket.rep());
    let opened = conv(l::udp::HostUdpSocket::stream(v, borrowed, peer.map(Into::into)).await)?;
    match opened {
        Ok((incoming, outgoing)) => {
            *v.table.get_mut(s)? = UdpSocket::Open {
                socket,
                incoming,
                outgoing,
            };
            Ok(Ok(()))
        }
        Err(e) => {
            *v.table.get_mut(s)? = match peer {
                Some(peer) => UdpSocket::Connecting(socket, peer),
                None => UdpSocket::Initial(socket),
            };
            Ok(Err(e))
        }
    }
}

impl udp_create_socket::Host for WasiSocketsCtxView<'_> {
    async fn create_udp_socket(
        &mut self,
        family: IpAddressFamily,
    ) -> SockResult<Resource<UdpSocket>> {
        let created =
            conv(l::udp_create_socket::Host::create_udp_socket(self, family.into()).await)?;
        match created {
            Ok(socket) => Ok(Ok(self.table.push(UdpSocket::Initial(socket))?)),
            Err(e) => Ok(Err(e)),
        }
    }
}

impl udp::Host for WasiSocketsCtxView<'_> {}

impl udp::HostUdpSocket for WasiSocketsCtxView<'_> {
    async fn start_bind(
        &mut self,
        s: Resource<UdpSocket>,
        network: Resource<Network>,
        local: IpSocketAddress,
    ) -> SockResult<()> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::start_bind(self, socket, network, local.into()).await)
    }

    fn finish_bind(&mut self, s: Resource<UdpSocket>) -> SockResult<()> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::finish_bind(self, socket))
    }

    fn start_connect(
        &mut self,
        s: Resource<UdpSocket>,
        _network: Resource<Network>,
        remote: IpSocketAddress,
    ) -> SockResult<()> {
        let state = self.table.get_mut(&s)?;
        match mem::replace(state, UdpSocket::Moving) {
            UdpSocket::Initial(socket) => {
                *state = UdpSocket::Connecting(socket, remote);
                Ok(Ok(()))
            }
            other => {
                *state = other;
                Ok(Err(ErrorCode::InvalidState))
            }
        }
    }

    async fn finish_connect(&mut self, s: Resource<UdpSocket>) -> SockResult<()> {
        open_streams(self, &s, true).await
    }

    async fn receive(
        &mut self,
        s: Resource<UdpSocket>,
        max_results: u64,
    ) -> SockResult<Vec<udp::Datagram>> {
        if let Err(e) = open_streams(self, &s, false).await? {
            return Ok(Err(e));
        }
        let UdpSocket::Open { incoming, .. } = self.table.get(&s)? else {
            return Ok(Err(ErrorCode::InvalidState));
        };
        let incoming = Resource::new_borrow(incoming.rep());
        conv(
            l::udp::HostIncomingDatagramStream::receive(self, incoming, max_results)
                .map(|d| d.into_iter().map(udp::Datagram::from).collect::<Vec<_>>()),
        )
    }

    /// Sends as many datagrams as 0.2's `check-send` permits now, and says how many.
    async fn send(
        &mut self,
        s: Resource<UdpSocket>,
        mut datagrams: Vec<udp::Datagram>,
    ) -> SockResult<u64> {
        if let Err(e) = open_streams(self, &s, false).await? {
            return Ok(Err(e));
        }
        let UdpSocket::Open { outgoing, .. } = self.table.get(&s)? else {
            return Ok(Err(ErrorCode::InvalidState));
        };
        let rep = outgoing.rep();
        let permitted: Result<u64, ErrorCode> = conv(
            l::udp::HostOutgoingDatagramStream::check_send(self, Resource::new_borrow(rep)),
        )?;
        match permitted {
            Ok(n) => datagrams.truncate(usize::try_from(n).unwrap_or(usize::MAX)),
            Err(e) => return Ok(Err(e)),
        }
        let datagrams = datagrams
            .into_iter()
            .map(|d| l::udp::OutgoingDatagram {
                data: d.data,
                remote_address: Some(d.remote_address.into()),
            })
            .collect();
        conv(l::udp::HostOutgoingDatagramStream::send(
            self,
            Resource::new_borrow(rep),
            datagrams,
        ))
    }

    fn local_address(&mut self, s: Resource<UdpSocket>) -> SockResult<IpSocketAddress> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::local_address(self, socket))
    }

    fn remote_address(&mut self, s: Resource<UdpSocket>) -> SockResult<IpSocketAddress> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::remote_address(self, socket))
    }

    fn address_family(&mut self, s: Resource<UdpSocket>) -> wasmtime::Result<IpAddressFamily> {
        let socket = inner(self, &s)?;
        Ok(l::udp::HostUdpSocket::address_family(self, socket)?.into())
    }

    /// Gone from 0.2.
    fn ipv6_only(&mut self, _s: Resource<UdpSocket>) -> SockResult<bool> {
        Ok(Err(ErrorCode::NotSupported))
    }

    fn set_ipv6_only(&mut self, _s: Resource<UdpSocket>, _value: bool) -> SockResult<()> {
        Ok(Err(ErrorCode::NotSupported))
    }

    fn unicast_hop_limit(&mut self, s: Resource<UdpSocket>) -> SockResult<u8> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::unicast_hop_limit(self, socket))
    }

    fn set_unicast_hop_limit(&mut self, s: Resource<UdpSocket>, value: u8) -> SockResult<()> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::set_unicast_hop_limit(
            self, socket, value,
        ))
    }

    fn receive_buffer_size(&mut self, s: Resource<UdpSocket>) -> SockResult<u64> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::receive_buffer_size(self, socket))
    }

    fn set_receive_buffer_size(&mut self, s: Resource<UdpSocket>, value: u64) -> SockResult<()> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::set_receive_buffer_size(
            self, socket, value,
        ))
    }

    fn send_buffer_size(&mut self, s: Resource<UdpSocket>) -> SockResult<u64> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::send_buffer_size(self, socket))
    }

    fn set_send_buffer_size(&mut self, s: Resource<UdpSocket>, value: u64) -> SockResult<()> {
        let socket = inner(self, &s)?;
        conv(l::udp::HostUdpSocket::set_send_buffer_size(
            self, socket, value,
        ))
    }

    fn subscribe(&mut self, s: Resource<UdpSocket>) -> wasmtime::Result<Resource<DynPollable>> {
        let socket = inner(self, &s)?;
        l::udp::HostUdpSocket::subscribe(self, socket)
    }

    async fn drop(&mut self, rep: Resource<UdpSocket>) -> wasmtime::Result<()> {
        let socket = match self.table.delete(rep)? {
            UdpSocket::Initial(s) | UdpSocket::Connecting(s, _) => s,
            UdpSocket::Open {
                socket,
                incoming,
                outgoing,
            } => {
                l::udp::HostIncomingDatagramStream::drop(self, incoming)?;
                l::udp::HostOutgoingDatagramStream::drop(self, outgoing).await?;
                socket
            }
            UdpSocket::Moving => return Ok(()),
        };
        l::udp::HostUdpSocket::drop(self, socket)
    }
}

impl From<l::udp::IncomingDatagram> for udp::Datagram {
    fn from(d: l::udp::IncomingDatagram) -> udp::Datagram {
        udp::Datagram {
            data: d.data,
            remote_address: d.remote_address.into(),
        }
    }
}

convert! {
    enum l::network::ErrorCode => ErrorCode {
        Unknown, AccessDenied, NotSupported, InvalidArgument, OutOfMemory, Timeout,
        ConcurrencyConflict, NotInProgress, WouldBlock, InvalidState, NewSocketLimit,
        AddressNotBindable, AddressInUse, RemoteUnreachable, ConnectionRefused,
        ConnectionReset, ConnectionAborted, DatagramTooLarge, NameUnresolvable,
        TemporaryResolverFailure, PermanentResolverFailure,
    }
    enum l::network::IpAddress [<=>] IpAddress { Ipv4(x), Ipv6(x) }
    enum l::network::IpSocketAddress [<=>] IpSocketAddress { Ipv4(x), Ipv6(x) }
    struct l::network::Ipv4SocketAddress [<=>] network::Ipv4SocketAddress { port, address }
    struct l::network::Ipv6SocketAddress [<=>] network::Ipv6SocketAddress {
        port, flow_info, scope_id, address,
    }
    enum l::network::IpAddressFamily [<=>] IpAddressFamily { Ipv4, Ipv6 }
    enum tcp::ShutdownType => l::tcp::ShutdownType { Receive, Send, Both }
}
