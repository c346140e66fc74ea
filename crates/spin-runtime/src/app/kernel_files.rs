//! A manifest whose `files` entry names a kernel filesystem is refused before it is loaded.
//!
//! A `files` entry that resolves (through a symlink of the image, or with the manifest at
//! `/`) to procfs, sysfs, `/dev` or another kernel filesystem is walked by the manifest
//! loader like any directory: the walk meets entries that vanish under it (`/proc/<pid>`)
//! and fails with a bare `ENOENT` (or, through `/proc/self/root`, walks the whole node).
//! Such a path is hidden from guests anyway (the runtime's confinement names the rule for
//! the locked-app form); this finds the entry first, so the error names it, where it
//! resolves and the rule.

use std::path::{Path, PathBuf};

use spin_app_format::untrusted::{read_regular, shown, shown_path, MAX_DOCUMENT_BYTES};

/// Paths no guest may see, whatever is mounted there.
const KERNEL_PATHS: &[&str] = &["/proc", "/sys", "/dev"];

/// `statfs` magic numbers of the kernel filesystems hidden from guests (procfs, sysfs,
/// devpts, cgroup v1/v2, debugfs, tracefs, securityfs, bpffs, configfs, mqueue, nsfs,
/// pstore, efivarfs, binfmt_misc, selinuxfs, hugetlbfs, fusectl).
const KERNEL_MAGIC: &[i64] = &[
    0x9fa0,
    0x6265_6572,
    0x1cd1,
    0x0027_e0eb,
    0x6367_7270,
    0x6462_6720,
    0x7472_6163,
    0x7363_6673,
    0xcafe_4a11,
    0x6265_6570,
    0x1980_0202,
    0x6e73_6673,
    0x6165_676c,
    0xde5e_81e4,
    0x4249_4e4d,
    0xf97c_ff8c,
    0x9584_58f6,
    0x6573_5543,
];

/// The error for manifest `manifest` when one of its `files` entries resolves to a kernel
/// filesystem or a device node: naming the component, the entry, its target and the rule.
/// `None` when no entry does, or the manifest cannot be read (the loader then says why).
pub(super) fn kernel_files_error(manifest: &Path) -> Option<anyhow::Error> {
    let file = if manifest.is_dir() {
        manifest.join(super::MANIFEST_FILE)
    } else {
        manifest.to_path_buf()
    };
    let text = read_regular(&file, MAX_DOCUMENT_BYTES, "Spin manifest").ok()?;
    let doc: toml::Table = toml::from_str(std::str::from_utf8(&text).ok()?).ok()?;
    let base = file.parent().unwrap_or(Path::new("."));
    let components = doc.get("component")?.as_table()?;
    for (id, c) in components {
        for entry in c
            .get("files")
            .and_then(|f| f.as_array())
            .into_iter()
            .flatten()
        {
            let source = match entry {
                toml::Value::String(s) => s.as_str(),
                toml::Value::Table(t) => match t.get("source").and_then(|s| s.as_str()) {
                    Some(s) => s,
                    None => continue,
                },
                _ => continue,
            };
            if let Some((target, what)) = kernel_target(&base.join(source)) {
                return Some(anyhow::anyhow!(
                    "{}: key `component.{}.files`: entry `{}` resolves to {}, {what}: a path \
                     no guest may see (procfs, sysfs, device nodes, cgroupfs and other kernel \
                     filesystems are hidden from Wasm guests); point it at a directory of the app",
                    shown_path(&file),
                    shown(id),
                    shown(source),
                    shown_path(&target),
                ));
            }
        }
    }
    None
}

/// Where `path` resolves and what makes it forbidden, if it is a kernel filesystem, below
/// [`KERNEL_PATHS`] or a device node.
fn kernel_target(path: &Path) -> Option<(PathBuf, &'static str)> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::FileTypeExt;
    let target = std::fs::canonicalize(path).ok()?;
    if KERNEL_PATHS.iter().any(|k| target.starts_with(k)) {
        return Some((target, "below /proc, /sys or /dev"));
    }
    let ft = std::fs::metadata(&target).ok()?.file_type();
    if ft.is_block_device() || ft.is_char_device() {
        return Some((target, "a device node"));
    }
    let c = std::ffi::CString::new(target.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs of a NUL-terminated path into a zeroed struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    KERNEL_MAGIC
        .contains(&(st.f_type as i64))
        .then_some((target, "a kernel filesystem"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_entry_linking_to_proc_is_named_with_the_rule() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("spin.toml"),
            "spin_manifest_version = 2\n[application]\nname = \"x\"\n\
             [component.web]\nsource = \"a.wasm\"\n\
             files = [\"static\", { source = \"procl\", destination = \"/p\" }]\n",
        )
        .unwrap();
        std::fs::create_dir(d.path().join("static")).unwrap();
        std::os::unix::fs::symlink("/proc/self", d.path().join("procl")).unwrap();
        let e = kernel_files_error(d.path()).unwrap().to_string();
        assert!(
            e.contains("key `component.web.files`: entry `procl` resolves to /proc/")
                && e.contains("no guest may see"),
            "{e}"
        );
        // Through the loader: refused before anything below /proc is walked.
        let e = format!("{:#}", crate::App::load_manifest(d.path()).unwrap_err());
        assert!(e.contains("entry `procl` resolves to /proc/"), "{e}");
        std::fs::remove_file(d.path().join("procl")).unwrap();
        std::os::unix::fs::symlink("static", d.path().join("procl")).unwrap();
        assert!(kernel_files_error(d.path()).is_none());
    }
}
