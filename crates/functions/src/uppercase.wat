;; Uppercases ASCII text: a complete LABIOS function.
(module
  (memory (export "memory") 1)
  ;; A bump allocator is enough: every call gets a fresh instance.
  (global $next (mut i32) (i32.const 1024))
  (func (export "labios_alloc") (param $len i32) (result i32)
    (local $ptr i32)
    (local.set $ptr (global.get $next))
    (global.set $next (i32.add (local.get $ptr) (local.get $len)))
    ;; Grow the memory until the new end fits (-1 means refused).
    (block $fits
      (loop $grow
        (br_if $fits
          (i64.le_u (i64.extend_i32_u (global.get $next))
                    (i64.mul (i64.extend_i32_u (memory.size)) (i64.const 65536))))
        (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1))
          (then (return (i32.const -1))))
        (br $grow)))
    (local.get $ptr))
  ;; Uppercases the input in place and returns it: (ptr << 32) | len.
  (func (export "labios_run")
        (param $in i32) (param $len i32) (param $args i32) (param $args_len i32)
        (result i64)
    (local $i i32) (local $c i32)
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (local.set $c (i32.load8_u (i32.add (local.get $in) (local.get $i))))
        (if (i32.lt_u (i32.sub (local.get $c) (i32.const 97)) (i32.const 26))
          (then (i32.store8 (i32.add (local.get $in) (local.get $i))
                            (i32.sub (local.get $c) (i32.const 32)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (i64.or (i64.shl (i64.extend_i32_u (local.get $in)) (i64.const 32))
            (i64.extend_i32_u (local.get $len)))))
