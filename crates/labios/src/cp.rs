//! `labios cp SRC DST`: stages data in and out (article 3.6.1) between the
//! LABIOS namespace (`labios:/path`), local files (any other path) and
//! external storage (`NAME:/path` of a mount, `s3://bucket/key` of a
//! declared bucket), with a progress bar on a terminal.
//!
//! Reads of LABIOS and external data are labels executed by workers. Bytes
//! bound for external storage stream from this process into one upload
//! (multipart on S3): an object cannot be written in pieces by several
//! workers at once.

use anyhow::{bail, Context};
use bytes::Bytes;
use futures::TryStreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use labios_bridge::external::stream_into;
use labios_bridge::{Mapping, Mounts};
use labios_client::Client;
use labios_label::Error;
use labios_store::FileKind;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Instant;

/// Bytes moved per request.
const CHUNK: u64 = 8 << 20;
/// Write requests to LABIOS in flight before waiting for the oldest.
const IN_FLIGHT: usize = 8;

/// One end of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Local(PathBuf),
    Labios(String),
    External(String),
}

impl Place {
    pub fn parse(s: &str) -> Place {
        if let Some(p) = s.strip_prefix("labios:") {
            Place::Labios(if p.starts_with('/') {
                p.to_string()
            } else {
                format!("/{p}")
            })
        } else if labios_bridge::is_external(s) {
            Place::External(s.to_string())
        } else {
            Place::Local(PathBuf::from(s))
        }
    }

    fn join(&self, name: &str) -> Place {
        match self {
            Place::Local(p) => Place::Local(p.join(name)),
            Place::Labios(p) => Place::Labios(format!("{}/{name}", p.trim_end_matches('/'))),
            Place::External(p) => Place::External(format!("{}/{name}", p.trim_end_matches('/'))),
        }
    }

    fn name(&self) -> String {
        match self {
            Place::Local(p) => p.display().to_string(),
            Place::Labios(p) => format!("labios:{p}"),
            Place::External(p) => p.clone(),
        }
    }

    fn basename(&self) -> Option<String> {
        let s = match self {
            Place::Local(p) => return p.file_name().map(|n| n.to_string_lossy().into_owned()),
            Place::Labios(p) | Place::External(p) => p.trim_end_matches('/'),
        };
        s.rsplit(['/', ':'])
            .next()
            .filter(|n| !n.is_empty())
            .map(String::from)
    }

    /// `Some(size)` for a file, `None` for a directory; an error when missing.
    async fn kind(&self, client: &Client) -> anyhow::Result<Option<u64>> {
        match self {
            Place::Local(p) => {
                let m = std::fs::metadata(p).with_context(|| format!("{}", p.display()))?;
                Ok((!m.is_dir()).then_some(m.len()))
            }
            Place::Labios(p) | Place::External(p) => {
                let m = client.stat(p).await.with_context(|| self.name())?;
                Ok((m.kind == FileKind::File).then_some(m.size))
            }
        }
    }

    async fn exists_as_dir(&self, client: &Client) -> bool {
        matches!(self.kind(client).await, Ok(None))
    }

    /// Files under a directory, as (path relative to it, size).
    async fn walk(&self, client: &Client) -> anyhow::Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        let mut dirs = vec![String::new()];
        while let Some(rel) = dirs.pop() {
            let here = if rel.is_empty() {
                self.clone()
            } else {
                self.join(&rel)
            };
            let children: Vec<(String, Option<u64>)> = match &here {
                Place::Local(p) => std::fs::read_dir(p)
                    .with_context(|| format!("{}", p.display()))?
                    .map(|e| {
                        let e = e?;
                        let m = e.metadata()?;
                        Ok((
                            e.file_name().to_string_lossy().into_owned(),
                            (!m.is_dir()).then_some(m.len()),
                        ))
                    })
                    .collect::<std::io::Result<_>>()?,
                Place::Labios(p) | Place::External(p) => client
                    .list(p)
                    .await
                    .with_context(|| here.name())?
                    .into_iter()
                    .map(|m| {
                        let name = m.path.rsplit('/').next().unwrap_or("").to_string();
                        (name, (m.kind == FileKind::File).then_some(m.size))
                    })
                    .collect(),
            };
            for (name, size) in children {
                let child = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                match size {
                    Some(size) => out.push((child, size)),
                    None => dirs.push(child),
                }
            }
        }
        out.sort();
        Ok(out)
    }
}

/// Copies `src` to `dst` (a directory tree with `recursive`).
pub async fn cp(client: &Client, src: &str, dst: &str, recursive: bool) -> anyhow::Result<()> {
    let into_dir = dst.ends_with('/');
    let (src, mut dst) = (Place::parse(src), Place::parse(dst));
    let started = Instant::now();
    let files: Vec<(Place, Place, u64)> = match src.kind(client).await? {
        Some(size) => {
            if into_dir || dst.exists_as_dir(client).await {
                let name = src
                    .basename()
                    .with_context(|| format!("{} has no file name", src.name()))?;
                dst = dst.join(&name);
            }
            vec![(src.clone(), dst.clone(), size)]
        }
        None if !recursive => bail!("{} is a directory (use -r to copy a tree)", src.name()),
        None if inside(&src, &dst, client)? => {
            bail!("cannot copy {} into itself, {}", src.name(), dst.name())
        }
        None => src
            .walk(client)
            .await?
            .into_iter()
            .map(|(rel, size)| (src.join(&rel), dst.join(&rel), size))
            .collect(),
    };
    let total: u64 = files.iter().map(|f| f.2).sum();
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    // Opened once for the files streamed from here into external storage.
    let mounts = Mounts::new(&client.config().mounts)?;
    for (from, to, _) in &files {
        if same_file(client, from, to).await? {
            bail!("{} and {} are the same file", from.name(), to.name());
        }
    }
    for (from, to, size) in &files {
        bar.set_message(from.basename().unwrap_or_default());
        copy_file(client, &mounts, from, to, *size, &bar)
            .await
            .with_context(|| format!("copying {} to {}", from.name(), to.name()))?;
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "copied {} file{}, {total} bytes, {} -> {} in {secs:.3} s ({:.1} MiB/s)",
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        src.name(),
        dst.name(),
        total as f64 / (1 << 20) as f64 / secs.max(1e-9)
    );
    Ok(())
}

async fn copy_file(
    client: &Client,
    mounts: &Mounts,
    from: &Place,
    to: &Place,
    size: u64,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let chunks = chunks(Source::open(from)?, client, size, bar);
    futures::pin_mut!(chunks);
    match to {
        Place::Local(p) => {
            if let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)?;
            }
            let mut out = std::fs::File::create(p).with_context(|| format!("{}", p.display()))?;
            while let Some((_, chunk)) = chunks.try_next().await? {
                out.write_all(&chunk)?;
            }
            out.sync_all()?;
        }
        Place::Labios(p) => {
            make_parents(client, p).await?;
            client.catalog().open_or_create(p, 0o644).await?;
            client.truncate(p, 0).await?;
            let mut handles = Vec::new();
            while let Some((at, chunk)) = chunks.try_next().await? {
                handles.push(client.write_at_async(p, at, chunk).await?);
                if handles.len() >= IN_FLIGHT {
                    client.wait(&handles.remove(0)).await?;
                }
            }
            client.wait_many(&handles).await?;
            client.flush(p).await?;
        }
        Place::External(p) if !client.external(p)?.config.streams_whole_files() => {
            // Written by workers, as any client's writes: their mount keeps
            // the file's cached blocks, merged writes and relaxed metadata,
            // which a copy written from this process would contradict.
            // What was there goes first, or a longer old file would keep
            // its tail.
            match client.remove(p).await {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            let mut written = false;
            while let Some((at, chunk)) = chunks.try_next().await? {
                client.write_at_sync(p.as_str(), at, chunk).await?;
                written = true;
            }
            // An empty source is written too: it makes the empty file.
            if !written {
                client.write_at_sync(p.as_str(), 0, Bytes::new()).await?;
            }
            client.flush(p.as_str()).await?;
        }
        Place::External(p) => {
            let target = mounts.resolve(p)?;
            let bytes = chunks
                .map_ok(|(_, chunk)| chunk)
                .map_err(|e| Error::Storage(format!("{e:#}")));
            stream_into(&target, bytes).await?;
        }
    }
    Ok(())
}

/// The bytes of `source`, up to `size`, as chunks of at most [`CHUNK`] with
/// the offset of each, counted on `bar` as they are read. Ends early where
/// the source does (a file that shrank meanwhile).
fn chunks<'a>(
    source: Source,
    client: &'a Client,
    size: u64,
    bar: &'a ProgressBar,
) -> impl futures::Stream<Item = anyhow::Result<(u64, Bytes)>> + 'a {
    futures::stream::try_unfold((source, 0u64), move |(mut source, at)| async move {
        if at >= size {
            return Ok(None);
        }
        let chunk = source.read(client, at).await?;
        if chunk.is_empty() {
            return Ok(None);
        }
        bar.inc(chunk.len() as u64);
        let next = at + chunk.len() as u64;
        Ok(Some(((at, chunk), (source, next))))
    })
}

/// Whether `a` and `b` name one file, which a copy would destroy before
/// reading it (the destination is emptied first): two names of one LABIOS
/// file (hard links included), one external path spelled two ways or named
/// by two mounts, or a local file and the same file through a directory
/// mount. Compared ignoring ASCII case for external storage, which may be
/// case-insensitive: a copy refused wrongly can be made another way, a
/// source destroyed cannot be brought back.
async fn same_file(client: &Client, a: &Place, b: &Place) -> anyhow::Result<bool> {
    Ok(
        match (a.location(client).await?, b.location(client).await?) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
    )
}

/// Whether `dst` lies inside directory `src`, where a recursive copy
/// would write into the tree it reads.
fn inside(src: &Place, dst: &Place, client: &Client) -> anyhow::Result<bool> {
    let under = |s: &str, d: &str| {
        let s = s.trim_end_matches('/');
        d == s || d.starts_with(&format!("{s}/"))
    };
    Ok(match (src, dst) {
        (Place::Labios(s), Place::Labios(d)) => under(
            &labios_label::path::normalize(s)?,
            &labios_label::path::normalize(d)?,
        ),
        (Place::External(s), Place::External(d)) => under(
            &client.external(s)?.location().to_ascii_lowercase(),
            &client.external(d)?.location().to_ascii_lowercase(),
        ),
        (Place::Local(s), Place::Local(d)) => {
            std::path::absolute(d)?.starts_with(std::fs::canonicalize(s)?)
        }
        _ => false,
    })
}

impl Place {
    /// The file this place names, as one string that two names of it
    /// share; `None` when it does not exist (nothing there to lose).
    async fn location(&self, client: &Client) -> anyhow::Result<Option<String>> {
        let local = |p: &std::path::Path| {
            std::fs::canonicalize(p)
                .ok()
                .map(|p| format!("local:{}", p.display()))
        };
        Ok(match self {
            Place::Local(p) => local(p),
            Place::Labios(p) => client
                .stat(p)
                .await
                .ok()
                .map(|m| format!("labios:{}", m.id)),
            Place::External(p) => {
                let named = client.external(p)?;
                match named.config.uri.strip_prefix("fs://") {
                    Some(dir) if named.config.mapping == Mapping::Direct => {
                        local(&std::path::Path::new(dir).join(&named.path))
                    }
                    _ => Some(format!("ext:{}", named.location().to_ascii_lowercase())),
                }
            }
        })
    }
}

async fn make_parents(client: &Client, path: &str) -> anyhow::Result<()> {
    let mut at = String::new();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push('/');
        at.push_str(part);
        match client.mkdir(&at).await {
            Ok(_) | Err(Error::AlreadyExists(_)) => {}
            Err(e) => return Err(e).with_context(|| format!("labios:{at}")),
        }
    }
    Ok(())
}

/// Where a copy's bytes come from.
enum Source {
    Local(std::fs::File),
    Client(String),
}

impl Source {
    fn open(place: &Place) -> anyhow::Result<Source> {
        Ok(match place {
            Place::Local(p) => {
                Source::Local(std::fs::File::open(p).with_context(|| format!("{}", p.display()))?)
            }
            Place::Labios(p) | Place::External(p) => Source::Client(p.clone()),
        })
    }

    async fn read(&mut self, client: &Client, at: u64) -> anyhow::Result<Bytes> {
        match self {
            Source::Local(f) => {
                f.seek(SeekFrom::Start(at))?;
                let mut buf = Vec::with_capacity(CHUNK as usize);
                f.take(CHUNK).read_to_end(&mut buf)?;
                Ok(Bytes::from(buf))
            }
            Source::Client(p) => Ok(client.read_at(p.as_str(), at, CHUNK).await?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_told_apart_by_their_form() {
        assert_eq!(Place::parse("labios:/a/b"), Place::Labios("/a/b".into()));
        assert_eq!(Place::parse("labios:a"), Place::Labios("/a".into()));
        assert_eq!(Place::parse("pfs:/x"), Place::External("pfs:/x".into()));
        assert_eq!(Place::parse("s3://b/k"), Place::External("s3://b/k".into()));
        assert_eq!(Place::parse("/tmp/f"), Place::Local("/tmp/f".into()));
        assert_eq!(Place::parse("rel/f"), Place::Local("rel/f".into()));
        assert_eq!(Place::parse("s3://b/k/obj").basename().unwrap(), "obj");
        assert_eq!(Place::parse("pfs:f").basename().unwrap(), "f");
        assert_eq!(
            Place::parse("labios:/d/").join("x"),
            Place::Labios("/d/x".into())
        );
    }
}
