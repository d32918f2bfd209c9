//! Crafted components for the hostile-plugin tests: valid WebAssembly, made to hurt whatever
//! processes them. Encoded by hand (no toolchain involved), so a test states exactly what it
//! sends.

/// A component that compiles slowly and hungrily: one core module with one function of
/// `locals` 64-bit locals and `blocks` nested-free blocks, each a join point that redefines a
/// local and keeps every local live to the end (their sum is the result), so the compiler's SSA
/// form and register allocator carry hundreds of live values across tens of thousands of
/// blocks. About 14 bytes of body per block; gzip shrinks it to almost nothing, so it fits a
/// ConfigMap. It is a valid component with no exports: the host must compile it before it can
/// find out it is not a reconciler, which is the point.
pub fn compile_bomb(locals: u32, blocks: u32) -> Vec<u8> {
    let mut body = Vec::new();
    // One run of `locals` i64 locals.
    leb(1, &mut body);
    leb(locals, &mut body);
    body.push(0x7e);
    for b in 0..blocks {
        let (test, source, target) = (b % locals, (b * 7 + 3) % locals, (b * 13 + 5) % locals);
        body.push(0x02); // block
        body.push(0x40); //   (no result)
        body.push(0x20); //   local.get test
        leb(test, &mut body);
        body.push(0xa7); //   i32.wrap_i64
        body.push(0x0d); //   br_if 0
        leb(0, &mut body);
        body.push(0x20); //   local.get source
        leb(source, &mut body);
        body.push(0x42); //   i64.const 1
        leb(1, &mut body);
        body.push(0x7c); //   i64.add
        body.push(0x21); //   local.set target
        leb(target, &mut body);
        body.push(0x0b); // end
    }
    // Every local stays live to the end: their sum is the function's result.
    body.push(0x42);
    leb(0, &mut body);
    for l in 0..locals {
        body.push(0x20);
        leb(l, &mut body);
        body.push(0x7c);
    }
    body.push(0x0b);

    let mut module = b"\0asm\x01\0\0\0".to_vec();
    // Type 0: func () -> i64.
    section(1, &[1, 0x60, 0, 1, 0x7e], &mut module);
    // One function of type 0.
    section(3, &[1, 0], &mut module);
    let mut code = Vec::new();
    leb(1, &mut code);
    leb(body.len() as u32, &mut code);
    code.extend_from_slice(&body);
    section(10, &code, &mut module);

    // A component holding the module: its core module section is all it has.
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(1, &module, &mut component);
    component
}

/// A component whose one function has a body of `bytes` bytes of `nop`s (over the host's cap on
/// a function's size, it is refused without being compiled).
pub fn oversized_function(bytes: u32) -> Vec<u8> {
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut module);
    section(3, &[1, 0], &mut module);
    let mut code = Vec::new();
    leb(1, &mut code);
    leb(bytes + 2, &mut code);
    code.push(0);
    code.extend(std::iter::repeat_n(0x01, bytes as usize));
    code.push(0x0b);
    section(10, &code, &mut module);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(1, &module, &mut component);
    component
}

fn section(id: u8, content: &[u8], out: &mut Vec<u8>) {
    out.push(id);
    leb(content.len() as u32, out);
    out.extend_from_slice(content);
}

fn leb(mut n: u32, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}
