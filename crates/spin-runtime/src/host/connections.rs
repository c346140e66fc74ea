//! What the outbound interfaces (Redis, PostgreSQL, MySQL, MQTT) have in common as host
//! features: no runtime-config section of their own (their limits, `[outbound_<kind>]`, are
//! the network policy's), and per instance what the component may reach and the guest's open
//! connections ([`Connections`]). Each is one [`OutboundInterface`]: its linking.

use std::marker::PhantomData;
use std::sync::Arc;

use wasmtime::component::{Linker, Resource, ResourceTable};

use super::feature::{AppContext, ComponentContext, FeatureTable, HostFeature, TableFull};
use super::runtime_config::Source;
use super::{ComponentHost, HostView, MAX_OPEN_CONNECTIONS};

/// An outbound interface: a [`HostFeature`] whose instance state is its [`Connections`].
pub trait OutboundInterface: Sized + 'static {
    /// Adds the interface's guest interfaces to `linker` ([`HostFeature::add_to_linker`]).
    fn add_to_linker<T: HostView>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Connections<Self>,
    ) -> anyhow::Result<()>;
}

impl<I: OutboundInterface> HostFeature for I {
    const SECTIONS: &'static [&'static str] = &[];
    type Config = ();
    type App = ();
    type Instance = Connections<I>;

    fn parse(_: &Source<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    fn build(_: &(), _: &AppContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    fn instance(_: &(), cx: &ComponentContext<'_>) -> anyhow::Result<Connections<I>> {
        Ok(Connections {
            outbound: cx.outbound.clone(),
            table: FeatureTable::default(),
            interface: PhantomData,
        })
    }

    fn add_to_linker<T: HostView>(
        linker: &mut Linker<T>,
        get: fn(&mut T) -> &mut Connections<I>,
    ) -> anyhow::Result<()> {
        <I as OutboundInterface>::add_to_linker(linker, get)
    }
}

/// One instance's state of outbound interface `I`: what the component may reach (its
/// allow-list, the app's network policy, its `[[client_tls]]` entries) and the guest's
/// handles in the interface's own table, where open connections count toward
/// [`MAX_OPEN_CONNECTIONS`]. A clone (a new instance's state) has no handles.
pub struct Connections<I> {
    outbound: Arc<ComponentHost>,
    table: FeatureTable,
    interface: PhantomData<fn() -> I>,
}

impl<I> Clone for Connections<I> {
    fn clone(&self) -> Self {
        Connections {
            outbound: self.outbound.clone(),
            table: FeatureTable::default(),
            interface: PhantomData,
        }
    }
}

impl<I> Connections<I> {
    /// What the component may reach.
    pub fn outbound(&self) -> &Arc<ComponentHost> {
        &self.outbound
    }

    /// The guest's handles.
    pub fn table(&mut self) -> &mut ResourceTable {
        self.table.get()
    }

    /// Adds an open connection, unless [`MAX_OPEN_CONNECTIONS`] are open.
    pub fn push_connection<R: Send + 'static>(
        &mut self,
        conn: R,
    ) -> Result<Resource<R>, TableFull> {
        self.table.push_counted(conn, MAX_OPEN_CONNECTIONS)
    }

    /// Closes a connection the guest dropped.
    pub fn close_connection<R: 'static>(&mut self, conn: Resource<R>) -> wasmtime::Result<()> {
        self.table.delete_counted(conn)?;
        Ok(())
    }
}
