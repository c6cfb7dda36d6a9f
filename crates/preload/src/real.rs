//! The functions LABIOS intercepts, as libc defines them: every call that
//! is not for a LABIOS path goes straight to these.

/// The next definition of `$name` after this library (libc's), looked up
/// once with `dlsym(RTLD_NEXT)` and cached.
macro_rules! real {
    ($name:ident : fn($($arg:ty),*) -> $ret:ty) => {{
        static PTR: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut p = PTR.load(std::sync::atomic::Ordering::Relaxed);
        if p == 0 {
            p = libc::dlsym(
                libc::RTLD_NEXT,
                concat!(stringify!($name), "\0").as_ptr().cast(),
            ) as usize;
            if p == 0 {
                $crate::real::missing(stringify!($name));
            }
            PTR.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*) -> $ret>(p)
    }};
}
pub(crate) use real;

/// libc lacks a function the program called: nothing sensible can follow.
pub fn missing(name: &str) -> ! {
    let msg = format!("labios preload: libc has no {name}\n");
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}
