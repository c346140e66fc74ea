//! `wasi:filesystem@0.2.0-rc-2023-10-18` on wasmtime-wasi's 0.2 filesystem.

use wasmtime::component::Resource;
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, ReaddirIterator};

use super::rc::filesystem::types::{
    self as t, AccessType, Advice, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry,
    ErrorCode, Filesize, MetadataHashValue, Modes, NewTimestamp, OpenFlags, PathFlags,
};
use super::{conv, convert, latest};

use latest::filesystem::types as l;

type FsResult<T> = wasmtime::Result<Result<T, ErrorCode>>;

impl t::Host for WasiFilesystemCtxView<'_> {
    fn filesystem_error_code(
        &mut self,
        err: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        Ok(l::Host::filesystem_error_code(self, err)?.map(ErrorCode::from))
    }
}

impl t::HostDescriptor for WasiFilesystemCtxView<'_> {
    fn read_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: Filesize,
    ) -> FsResult<Resource<DynInputStream>> {
        conv(l::HostDescriptor::read_via_stream(self, fd, offset))
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        conv(l::HostDescriptor::write_via_stream(self, fd, offset))
    }

    fn append_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        conv(l::HostDescriptor::append_via_stream(self, fd))
    }

    async fn advise(
        &mut self,
        fd: Resource<Descriptor>,
        offset: Filesize,
        length: Filesize,
        advice: Advice,
    ) -> FsResult<()> {
        conv(l::HostDescriptor::advise(self, fd, offset, length, advice.into()).await)
    }

    async fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        conv(l::HostDescriptor::sync_data(self, fd).await)
    }

    async fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorFlags> {
        conv(l::HostDescriptor::get_flags(self, fd).await)
    }

    async fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorType> {
        conv(l::HostDescriptor::get_type(self, fd).await)
    }

    async fn set_size(&mut self, fd: Resource<Descriptor>, size: Filesize) -> FsResult<()> {
        conv(l::HostDescriptor::set_size(self, fd, size).await)
    }

    async fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        atime: NewTimestamp,
        mtime: NewTimestamp,
    ) -> FsResult<()> {
        conv(l::HostDescriptor::set_times(self, fd, atime.into(), mtime.into()).await)
    }

    async fn read(
        &mut self,
        fd: Resource<Descriptor>,
        length: Filesize,
        offset: Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        conv(l::HostDescriptor::read(self, fd, length, offset).await)
    }

    async fn write(
        &mut self,
        fd: Resource<Descriptor>,
        buffer: Vec<u8>,
        offset: Filesize,
    ) -> FsResult<Filesize> {
        conv(l::HostDescriptor::write(self, fd, buffer, offset).await)
    }

    async fn read_directory(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<ReaddirIterator>> {
        conv(l::HostDescriptor::read_directory(self, fd).await)
    }

    async fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        conv(l::HostDescriptor::sync(self, fd).await)
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        conv(l::HostDescriptor::create_directory_at(self, fd, path).await)
    }

    async fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorStat> {
        conv(l::HostDescriptor::stat(self, fd).await)
    }

    async fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<DescriptorStat> {
        conv(l::HostDescriptor::stat_at(self, fd, path_flags.into(), path).await)
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        atime: NewTimestamp,
        mtime: NewTimestamp,
    ) -> FsResult<()> {
        conv(
            l::HostDescriptor::set_times_at(
                self,
                fd,
                path_flags.into(),
                path,
                atime.into(),
                mtime.into(),
            )
            .await,
        )
    }

    async fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path_flags: PathFlags,
        old_path: String,
        new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        conv(
            l::HostDescriptor::link_at(
                self,
                fd,
                old_path_flags.into(),
                old_path,
                new_descriptor,
                new_path,
            )
            .await,
        )
    }

    /// `modes` (permissions of a created file) is gone from 0.2: files are created with the
    /// host's defaults, as 0.2 creates them.
    async fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
        _modes: Modes,
    ) -> FsResult<Resource<Descriptor>> {
        conv(
            l::HostDescriptor::open_at(
                self,
                fd,
                path_flags.into(),
                path,
                open_flags.into(),
                flags.into(),
            )
            .await,
        )
    }

    async fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        conv(l::HostDescriptor::readlink_at(self, fd, path).await)
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        conv(l::HostDescriptor::remove_directory_at(self, fd, path).await)
    }

    async fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_descriptor: Resource<Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        conv(l::HostDescriptor::rename_at(self, fd, old_path, new_descriptor, new_path).await)
    }

    async fn symlink_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_path: String,
        new_path: String,
    ) -> FsResult<()> {
        conv(l::HostDescriptor::symlink_at(self, fd, old_path, new_path).await)
    }

    /// `exists` is answered with a stat; permission checks are gone from 0.2 and answer
    /// `unsupported`.
    async fn access_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        kind: AccessType,
    ) -> FsResult<()> {
        match kind {
            AccessType::Exists => {
                let r: FsResult<DescriptorStat> =
                    conv(l::HostDescriptor::stat_at(self, fd, path_flags.into(), path).await);
                Ok(r?.map(|_| ()))
            }
            AccessType::Access(_) => Ok(Err(ErrorCode::Unsupported)),
        }
    }

    async fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        conv(l::HostDescriptor::unlink_file_at(self, fd, path).await)
    }

    async fn change_file_permissions_at(
        &mut self,
        _fd: Resource<Descriptor>,
        _path_flags: PathFlags,
        _path: String,
        _modes: Modes,
    ) -> FsResult<()> {
        Ok(Err(ErrorCode::Unsupported))
    }

    async fn change_directory_permissions_at(
        &mut self,
        _fd: Resource<Descriptor>,
        _path_flags: PathFlags,
        _path: String,
        _modes: Modes,
    ) -> FsResult<()> {
        Ok(Err(ErrorCode::Unsupported))
    }

    async fn lock_shared(&mut self, _fd: Resource<Descriptor>) -> FsResult<()> {
        Ok(Err(ErrorCode::Unsupported))
    }

    async fn lock_exclusive(&mut self, _fd: Resource<Descriptor>) -> FsResult<()> {
        Ok(Err(ErrorCode::Unsupported))
    }

    async fn try_lock_shared(&mut self, _fd: Resource<Descriptor>) -> FsResult<()> {
        Ok(Err(ErrorCode::Unsupported))
    }

    async fn try_lock_exclusive(&mut self, _fd: Resource<Descriptor>) -> FsResult<()> {
        Ok(Err(ErrorCode::Unsupported))
    }

    async fn unlock(&mut self, _fd: Resource<Descriptor>) -> FsResult<()> {
        Ok(Err(ErrorCode::Unsupported))
    }

    async fn is_same_object(
        &mut self,
        fd: Resource<Descriptor>,
        other: Resource<Descriptor>,
    ) -> wasmtime::Result<bool> {
        l::HostDescriptor::is_same_object(self, fd, other).await
    }

    async fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<MetadataHashValue> {
        conv(l::HostDescriptor::metadata_hash(self, fd).await)
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
    ) -> FsResult<MetadataHashValue> {
        conv(l::HostDescriptor::metadata_hash_at(self, fd, path_flags.into(), path).await)
    }

    fn drop(&mut self, rep: Resource<Descriptor>) -> wasmtime::Result<()> {
        l::HostDescriptor::drop(self, rep)
    }
}

impl t::HostDirectoryEntryStream for WasiFilesystemCtxView<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<ReaddirIterator>,
    ) -> FsResult<Option<DirectoryEntry>> {
        conv(
            l::HostDirectoryEntryStream::read_directory_entry(self, stream)
                .await
                .map(|e| e.map(DirectoryEntry::from)),
        )
    }

    fn drop(&mut self, rep: Resource<ReaddirIterator>) -> wasmtime::Result<()> {
        l::HostDirectoryEntryStream::drop(self, rep)
    }
}

impl super::rc::filesystem::preopens::Host for WasiFilesystemCtxView<'_> {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        latest::filesystem::preopens::Host::get_directories(self)
    }
}

impl From<l::DescriptorStat> for DescriptorStat {
    fn from(s: l::DescriptorStat) -> DescriptorStat {
        DescriptorStat {
            type_: s.type_.into(),
            link_count: s.link_count,
            size: s.size,
            data_access_timestamp: s.data_access_timestamp.map(Into::into),
            data_modification_timestamp: s.data_modification_timestamp.map(Into::into),
            status_change_timestamp: s.status_change_timestamp.map(Into::into),
        }
    }
}

convert! {
    enum l::ErrorCode => ErrorCode {
        Access, WouldBlock, Already, BadDescriptor, Busy, Deadlock, Quota, Exist, FileTooLarge,
        IllegalByteSequence, InProgress, Interrupted, Invalid, Io, IsDirectory, Loop,
        TooManyLinks, MessageSize, NameTooLong, NoDevice, NoEntry, NoLock, InsufficientMemory,
        InsufficientSpace, NotDirectory, NotEmpty, NotRecoverable, Unsupported, NoTty,
        NoSuchDevice, Overflow, NotPermitted, Pipe, ReadOnly, InvalidSeek, TextFileBusy,
        CrossDevice,
    }
    enum Advice => l::Advice { Normal, Sequential, Random, WillNeed, DontNeed, NoReuse }
    flags DescriptorFlags [<=>] l::DescriptorFlags {
        READ, WRITE, FILE_INTEGRITY_SYNC, DATA_INTEGRITY_SYNC, REQUESTED_WRITE_SYNC,
        MUTATE_DIRECTORY,
    }
    enum l::DescriptorType => DescriptorType {
        Unknown, BlockDevice, CharacterDevice, Directory, Fifo, SymbolicLink, RegularFile,
        Socket,
    }
    enum NewTimestamp => l::NewTimestamp { NoChange, Now, Timestamp(x) }
    flags PathFlags => l::PathFlags { SYMLINK_FOLLOW }
    flags OpenFlags => l::OpenFlags { CREATE, DIRECTORY, EXCLUSIVE, TRUNCATE }
    struct l::MetadataHashValue => MetadataHashValue { lower, upper }
    struct l::DirectoryEntry => DirectoryEntry { type_, name }
}
