//! User-defined functions: WebAssembly modules run under wasmtime with CPU
//! (fuel and wall-clock) and memory limits, each call in a fresh instance,
//! so a misbehaving module fails its own label and nothing else.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc;
use std::time::Duration;

use labios_label::{Error, Result};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use wasmtime::{Config, Engine, Instance, Module, ResourceLimiter, Store, Trap, WasmFeatures};

/// Compiled modules kept; the same few functions run for many labels.
const CACHED_MODULES: usize = 64;
/// Table growth is bounded too (a table element is a pointer), by count.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// Resource limits of one call of a user function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Wasmtime fuel units (roughly one per WebAssembly instruction).
    pub fuel: u64,
    /// Linear memory, all memories of the instance together.
    pub memory_bytes: usize,
    /// Wall-clock time of the call, instantiation included.
    pub timeout_ms: u64,
}

impl Default for SandboxLimits {
    /// Ten billion instructions, 256 MiB and ten seconds: room for real
    /// per-label work, not for a runaway module.
    fn default() -> Self {
        SandboxLimits {
            fuel: 10_000_000_000,
            memory_bytes: 256 << 20,
            timeout_ms: 10_000,
        }
    }
}

/// Runs user modules; shared by all the labels of a worker (it is `Sync`).
pub struct Sandbox {
    engine: Engine,
    limits: SandboxLimits,
    /// Epoch ticks a call may last.
    deadline_ticks: u64,
    cache: Mutex<Cache>,
    /// Dropping it stops the epoch ticker thread.
    _ticker: mpsc::Sender<()>,
}

#[derive(Default)]
struct Cache {
    modules: HashMap<[u8; 32], Module>,
    /// Insertion order, for evicting the oldest.
    order: VecDeque<[u8; 32]>,
}

/// Store data: tracks memory so that exceeding the limit is reported as
/// such rather than as a generic trap.
struct Limiter {
    limit: usize,
    used: usize,
    exceeded: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.used.saturating_sub(current).saturating_add(desired);
        if total > self.limit {
            // An error (not `false`) traps: a module looping on a failing
            // `memory.grow` would otherwise spin until its fuel runs out.
            self.exceeded = true;
            return Err(wasmtime::Error::msg("memory limit exceeded"));
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Why a call failed, before it is named in an [`Error`].
enum Fault {
    Wasm(wasmtime::Error),
    Code(i64),
    Bounds(String),
}

impl Sandbox {
    pub fn new(limits: SandboxLimits) -> Result<Sandbox> {
        if limits.fuel == 0 || limits.memory_bytes == 0 || limits.timeout_ms == 0 {
            return Err(Error::InvalidArgument(format!(
                "sandbox limits must all be positive: {limits:?}"
            )));
        }
        let mut config = Config::new();
        config
            .consume_fuel(true)
            .epoch_interruption(true)
            .wasm_features(WasmFeatures::all(), false)
            .wasm_features(crate::module::FEATURES, true);
        let engine = Engine::new(&config).map_err(|e| {
            Error::Unavailable(format!("cannot start the WebAssembly sandbox: {e:#}"))
        })?;
        // Ten ticks per timeout, between 1 ms and 100 ms each: fine enough
        // to be accurate, coarse enough to cost nothing.
        let tick_ms = (limits.timeout_ms / 10).clamp(1, 100);
        let (stop, stopped) = mpsc::channel::<()>();
        let ticker = engine.clone();
        std::thread::Builder::new()
            .name("labios-wasm-epoch".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Duration::from_millis(tick_ms))
                {
                    ticker.increment_epoch();
                }
            })?;
        Ok(Sandbox {
            engine,
            limits,
            // One more tick than the timeout holds, since the current tick
            // may be nearly over when the call starts.
            deadline_ticks: limits.timeout_ms.div_ceil(tick_ms) + 1,
            cache: Mutex::new(Cache::default()),
            _ticker: stop,
        })
    }

    /// Checks `wasm` (binary or WAT text) as [`crate::check_module`] does
    /// and compiles it, keeping the compiled module for the calls to come:
    /// compiling can refuse what the check passed only for want of a
    /// compiler feature, so this is the whole check of a worker.
    pub fn check(&self, name: &str, wasm: &[u8]) -> Result<()> {
        self.module(name, wasm).map(drop)
    }

    fn module(&self, name: &str, wasm: &[u8]) -> Result<Module> {
        let hash: [u8; 32] = Sha256::digest(wasm).into();
        if let Some(module) = self.cache.lock().modules.get(&hash) {
            return Ok(module.clone());
        }
        // Checked and compiled outside the lock: compiling takes a while
        // and other functions go on running meanwhile.
        let binary = crate::module::check_module(name, wasm)?;
        let module = Module::new(&self.engine, &binary).map_err(|e| {
            Error::InvalidArgument(format!(
                "function {name}: the module is not valid WebAssembly: {e:#}"
            ))
        })?;
        let mut cache = self.cache.lock();
        if cache.modules.insert(hash, module.clone()).is_none() {
            cache.order.push_back(hash);
            if cache.order.len() > CACHED_MODULES {
                let oldest = cache.order.pop_front().expect("the cache is not empty");
                cache.modules.remove(&oldest);
            }
        }
        Ok(module)
    }

    /// Runs function `name` from module `wasm` on `input`.
    pub(crate) fn run(
        &self,
        name: &str,
        wasm: &[u8],
        input: &[u8],
        args: &[(String, String)],
    ) -> Result<Vec<u8>> {
        let module = self.module(name, wasm)?;
        let limiter = Limiter {
            limit: self.limits.memory_bytes,
            used: 0,
            exceeded: false,
        };
        let mut store = Store::new(&self.engine, limiter);
        store.limiter(|limiter| limiter);
        store
            .set_fuel(self.limits.fuel)
            .map_err(|e| Error::Unavailable(format!("sandbox: {e:#}")))?;
        store.set_epoch_deadline(self.deadline_ticks);
        let args: String = args.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        call(&mut store, &module, input, args.as_bytes()).map_err(|fault| {
            let cause = match fault {
                Fault::Code(code) => format!("failed with error code {code}"),
                Fault::Bounds(what) => format!("does not follow the LABIOS module ABI: {what}"),
                Fault::Wasm(_) if store.data().exceeded => format!(
                    "exceeded its memory limit of {} bytes",
                    self.limits.memory_bytes
                ),
                Fault::Wasm(e) => match e.downcast_ref::<Trap>() {
                    Some(Trap::OutOfFuel) => {
                        format!("ran out of fuel (its limit is {})", self.limits.fuel)
                    }
                    Some(Trap::Interrupt) => {
                        format!("exceeded its time limit of {} ms", self.limits.timeout_ms)
                    }
                    Some(trap) => {
                        let trap = trap.to_string();
                        format!("trapped: {}", trap.trim_start_matches("wasm trap: "))
                    }
                    None => format!("failed: {e:#}"),
                },
            };
            Error::Storage(format!("function {name} {cause}"))
        })
    }
}

/// One call in a fresh instance: no state survives from one label to the
/// next.
fn call(
    store: &mut Store<Limiter>,
    module: &Module,
    input: &[u8],
    args: &[u8],
) -> std::result::Result<Vec<u8>, Fault> {
    let instance = Instance::new(&mut *store, module, &[]).map_err(Fault::Wasm)?;
    // check_abi verified the three exports and their types.
    let memory = instance
        .get_memory(&mut *store, "memory")
        .expect("checked export");
    let alloc = instance
        .get_typed_func::<i32, i32>(&mut *store, "labios_alloc")
        .map_err(Fault::Wasm)?;
    let run = instance
        .get_typed_func::<(i32, i32, i32, i32), i64>(&mut *store, "labios_run")
        .map_err(Fault::Wasm)?;
    let place = |store: &mut Store<Limiter>, bytes: &[u8], what: &str| {
        let len = i32::try_from(bytes.len())
            .map_err(|_| Fault::Bounds(format!("{what} of {} bytes exceeds 2 GiB", bytes.len())))?;
        let ptr = alloc.call(&mut *store, len).map_err(Fault::Wasm)?;
        memory
            .write(&mut *store, ptr as u32 as usize, bytes)
            .map_err(|_| {
                Fault::Bounds(format!(
                    "labios_alloc({len}) returned {ptr}, outside its memory of {} bytes",
                    memory.data_size(&*store)
                ))
            })?;
        Ok((ptr, len))
    };
    let (in_ptr, in_len) = place(store, input, "the input")?;
    let (args_ptr, args_len) = place(store, args, "the arguments")?;
    let result = run
        .call(&mut *store, (in_ptr, in_len, args_ptr, args_len))
        .map_err(Fault::Wasm)?;
    if result < 0 {
        return Err(Fault::Code(result));
    }
    let (ptr, len) = ((result >> 32) as usize, (result & 0xffff_ffff) as usize);
    let data = memory.data(&*store);
    data.get(ptr..ptr + len).map(<[u8]>::to_vec).ok_or_else(|| {
        Fault::Bounds(format!(
            "labios_run returned {len} bytes at {ptr}, outside its memory of {} bytes",
            data.len()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRIVIAL: &str = r#"(module
        (memory (export "memory") 1)
        (func (export "labios_alloc") (param i32) (result i32) (i32.const 0))
        (func (export "labios_run") (param i32 i32 i32 i32) (result i64) (i64.const 0)))"#;

    #[test]
    fn modules_are_compiled_once_per_content() {
        let sandbox = Sandbox::new(SandboxLimits::default()).unwrap();
        for _ in 0..3 {
            assert_eq!(
                sandbox.run("t", TRIVIAL.as_bytes(), b"x", &[]).unwrap(),
                b""
            );
        }
        assert_eq!(sandbox.cache.lock().modules.len(), 1);
        for i in 0..CACHED_MODULES + 5 {
            let variant = TRIVIAL.replace("(i64.const 0)", &format!("(i64.const {i})"));
            sandbox.check("t", variant.as_bytes()).unwrap();
        }
        let cache = sandbox.cache.lock();
        assert_eq!(cache.modules.len(), CACHED_MODULES);
        assert_eq!(cache.order.len(), CACHED_MODULES);
    }
}
