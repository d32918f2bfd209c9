//! Compiling a component under a budget that cannot hurt the host.
//!
//! A valid component can be made so that Cranelift takes minutes and gigabytes to compile it
//! (one huge function with hundreds of live locals across thousands of blocks gzips to about
//! 100 KB). Compiled inside the host, it OOM-kills the whole process, and a restarted host
//! compiles it again. So the host never compiles a stranger's code in its own address space:
//!
//! 1. [`check_shape`] reads the component's sections (no compiling) and refuses more functions,
//!    or a larger function body, than any real plugin has, well below the parser's own limits.
//! 2. [`compile`] runs the compiler in a child process, the host binary's hidden
//!    `compile-worker` subcommand, with the component on its standard input and the compiled
//!    code on its standard output, under `RLIMIT_DATA` (heap and anonymous memory), `RLIMIT_CPU`
//!    and a wall-clock deadline, with no core dump and `PR_SET_PDEATHSIG` so it never outlives
//!    the host. Whatever the component does to the compiler, the child dies, not the host.
//!
//! The child's engine is the host's without the pooling allocator, which is not part of what
//! compiled code depends on (`Engine::precompile_compatibility_hash` does not cover it, and
//! the host checks the child's output when it deserializes it).
//!
//! Library users that run no `reconhost` binary (unit tests, benchmarks) compile in process
//! ([`Compiler::InProcess`]); the binary always uses [`Compiler::Worker`].

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmtime::wasmparser::{self, Parser, Payload};

use super::error::LoadError;

/// Where components are compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compiler {
    /// In this process, bounded only by [`check_shape`]: for tests and tools that embed the
    /// runtime and trust what they compile.
    InProcess,
    /// In a child process running `program compile-worker` (the `reconhost` binary), under the
    /// budget.
    Worker {
        /// The `reconhost` executable.
        program: PathBuf,
    },
}

/// Bounds on compiling one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileBudget {
    /// Heap and anonymous memory of the compiler process (`RLIMIT_DATA`), in bytes. Default
    /// 768 MiB: Cranelift needs about 400 MiB for any real plugin (measured: Rust `webapp`
    /// 432 MiB, Python's 392, TypeScript's 400; the peak follows the largest functions in
    /// flight more than the component's size), so this leaves room for larger ones while a
    /// compile bomb stops well short of what would hurt a 1 GiB container.
    pub memory: u64,
    /// CPU time of the compiler process (`RLIMIT_CPU`). Default 120 s: the largest plugins
    /// measured take 7–8 s of CPU (4–5 s of wall time on two cores).
    pub cpu: Duration,
    /// Wall-clock time before the compiler process is killed. Default 180 s.
    pub wall: Duration,
    /// Most functions in all of a component's core modules together. Default 100,000 (the
    /// Python plugin has 13,359).
    pub max_functions: u32,
    /// Largest single function body, in bytes. Default 1 MiB (the Python plugin's largest is
    /// 417 KiB).
    pub max_function_bytes: u32,
}

impl CompileBudget {
    /// The bounds in words, as error messages end: a failure recorded under one budget is not
    /// retried under the same one (`lifecycle`), and this is how it recognises the same one.
    pub fn describe(&self) -> String {
        format!(
            "budget: {} MiB of memory, {} s of CPU, {} s in all, {} functions, {} bytes per function",
            self.memory >> 20,
            self.cpu.as_secs(),
            self.wall.as_secs(),
            self.max_functions,
            self.max_function_bytes
        )
    }
}

impl Compiler {
    /// Compile in workers of the running executable, which must be the `reconhost` binary.
    pub fn this_binary() -> std::io::Result<Self> {
        Ok(Self::Worker {
            program: std::env::current_exe()?,
        })
    }
}

impl Default for CompileBudget {
    fn default() -> Self {
        Self {
            memory: 768 << 20,
            cpu: Duration::from_secs(120),
            wall: Duration::from_secs(180),
            max_functions: 100_000,
            max_function_bytes: 1 << 20,
        }
    }
}

/// What [`check_shape`] found: counts over every core module of the component.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// Core modules.
    pub modules: u32,
    /// Function bodies.
    pub functions: u32,
    /// The largest function body, in bytes.
    pub largest_function: u32,
    /// All function bodies, in bytes.
    pub code_bytes: u64,
}

/// Reads the component's sections, without validating or compiling them, and refuses it when it
/// is over `budget`'s function count or body size. Bytes that do not parse are left to the
/// compiler, whose error says more.
pub fn check_shape(
    origin: &str,
    digest: &str,
    bytes: &[u8],
    budget: &CompileBudget,
) -> Result<Shape, LoadError> {
    let mut shape = Shape::default();
    let refuse = |what: String| LoadError::OverBudget {
        origin: origin.to_owned(),
        digest: digest.to_owned(),
        what: format!("{what} ({})", budget.describe()),
    };
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else { break };
        match payload {
            Payload::Version {
                encoding: wasmparser::Encoding::Module,
                ..
            } => shape.modules += 1,
            Payload::CodeSectionStart { count, .. } => {
                shape.functions = shape.functions.saturating_add(count);
                if shape.functions > budget.max_functions {
                    return Err(refuse(format!(
                        "it has more than {} functions (the cap)",
                        budget.max_functions
                    )));
                }
            }
            Payload::CodeSectionEntry(body) => {
                let size = u32::try_from(body.range().len()).unwrap_or(u32::MAX);
                shape.largest_function = shape.largest_function.max(size);
                shape.code_bytes += u64::from(size);
                if size > budget.max_function_bytes {
                    return Err(refuse(format!(
                        "a function body has {size} bytes, over the cap of {}",
                        budget.max_function_bytes
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(shape)
}

/// Compiles `bytes` with `compiler` into wasmtime's serialized form, for `engine` (in process)
/// or for an engine of the same settings (in the worker).
pub fn compile(
    compiler: &Compiler,
    engine: &wasmtime::Engine,
    origin: &str,
    digest: &str,
    bytes: &[u8],
    budget: &CompileBudget,
) -> Result<Vec<u8>, LoadError> {
    check_shape(origin, digest, bytes, budget)?;
    let compile_err = |message: String| LoadError::Compile {
        origin: origin.to_owned(),
        digest: digest.to_owned(),
        message,
    };
    match compiler {
        Compiler::InProcess => engine
            .precompile_component(bytes)
            .map_err(|e| compile_err(format!("{e:#}"))),
        Compiler::Worker { program } => match in_worker(program, bytes, budget) {
            Ok(compiled) => Ok(compiled),
            Err(WorkerFailure::Compile(message)) => Err(compile_err(message)),
            Err(WorkerFailure::Budget(what)) => Err(LoadError::OverBudget {
                origin: origin.to_owned(),
                digest: digest.to_owned(),
                what: format!("{what} ({})", budget.describe()),
            }),
            Err(WorkerFailure::Start(message)) => Err(compile_err(format!(
                "the compiler process failed: {message}"
            ))),
        },
    }
}

/// How a worker's compile failed.
enum WorkerFailure {
    /// The component does not compile (the worker's explanation).
    Compile(String),
    /// The worker hit its budget (what it ran out of).
    Budget(String),
    /// The worker could not be run or answered nonsense.
    Start(String),
}

/// Exit code of a worker whose compile failed for a reason it could name.
const EXIT_COMPILE_ERROR: i32 = 3;

/// The worker's stderr kept for messages: the end of it.
const STDERR_KEPT: usize = 16 << 10;

fn in_worker(
    program: &PathBuf,
    bytes: &[u8],
    budget: &CompileBudget,
) -> Result<Vec<u8>, WorkerFailure> {
    use std::os::unix::process::CommandExt as _;

    let (memory, cpu) = (budget.memory, budget.cpu.as_secs().max(1));
    let mut command = Command::new(program);
    command
        .arg("compile-worker")
        .env_clear()
        // The budget bounds address space, so the worker's jemalloc gives back what is freed
        // rather than keeping it mapped for reuse (`retain`), in one arena, with no background
        // thread for a process that lives one compile: with the host's options the Python
        // plugin needed 500–600 MiB of budget, with these 375–400 (glibc's malloc: 350–375).
        .env(
            "_RJEM_MALLOC_CONF",
            "retain:false,narenas:1,background_thread:false",
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let limit = |resource, value: u64| {
                let rlim = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                if libc::setrlimit(resource, &rlim) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            limit(libc::RLIMIT_DATA, memory)?;
            // The soft limit sends SIGXCPU, which kills; the hard one a second later, SIGKILL.
            let rlim = libc::rlimit {
                rlim_cur: cpu,
                rlim_max: cpu + 1,
            };
            if libc::setrlimit(libc::RLIMIT_CPU, &rlim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit(libc::RLIMIT_CORE, 0)?;
            // First in line for the kernel's out-of-memory killer, before the host, should the
            // container's limit come before the budget (raising one's own score needs no
            // privilege).
            let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                libc::write(fd, b"1000".as_ptr().cast(), 4);
                libc::close(fd);
            }
            // The thread that forks waits for the child below, so this fires only if the host
            // itself dies.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| WorkerFailure::Start(format!("starting {}: {e}", program.display())))?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    std::thread::scope(|scope| {
        // The worker reads all of its input before it writes, but a worker that dies early
        // must not leave this thread blocked on a full pipe: the write fails when it goes.
        scope.spawn(move || {
            let _ = stdin.write_all(bytes);
        });
        let out = scope.spawn(move || {
            let mut out = Vec::new();
            stdout.read_to_end(&mut out).map(|_| out)
        });
        let err = scope.spawn(move || {
            let mut err = Vec::new();
            let _ = stderr.read_to_end(&mut err);
            let start = err.len().saturating_sub(STDERR_KEPT);
            String::from_utf8_lossy(&err[start..]).trim().to_owned()
        });
        let deadline = Instant::now() + budget.wall;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(WorkerFailure::Start(format!("waiting: {e}"))),
            }
        };
        let out = out.join().expect("the reader thread");
        let err = err.join().expect("the reader thread");
        judge(status, out, err, budget)
    })
}

/// The worker's outcome from its exit status, output and last words.
fn judge(
    status: Option<std::process::ExitStatus>,
    out: std::io::Result<Vec<u8>>,
    err: String,
    budget: &CompileBudget,
) -> Result<Vec<u8>, WorkerFailure> {
    use std::os::unix::process::ExitStatusExt as _;

    let Some(status) = status else {
        return Err(WorkerFailure::Budget(format!(
            "compiling took longer than {} s (the wall-clock budget)",
            budget.wall.as_secs()
        )));
    };
    let signal = match (status.code(), status.signal()) {
        (Some(0), _) => {
            return out.map_err(|e| WorkerFailure::Start(format!("reading its output: {e}")));
        }
        (Some(EXIT_COMPILE_ERROR), _) => return Err(WorkerFailure::Compile(err)),
        (Some(code), _) => {
            // A panic in the compiler: the component is what made it panic.
            return Err(WorkerFailure::Compile(format!(
                "the compiler exited with code {code}: {err}"
            )));
        }
        (None, Some(signal)) => signal,
        (None, None) => return Err(WorkerFailure::Start("it ended with no status".into())),
    };
    Err(WorkerFailure::Budget(
        if err.contains("memory allocation") || err.contains("out of memory") {
            // Rust aborts with "memory allocation of N bytes failed" at the heap limit.
            format!(
                "compiling needed more than {} MiB (the memory budget)",
                budget.memory >> 20
            )
        } else if signal == libc::SIGXCPU || signal == libc::SIGKILL {
            // SIGXCPU at the soft CPU limit, SIGKILL at the hard one (or from the kernel's
            // out-of-memory killer, when the machine runs out before the budget does).
            format!(
                "compiling used more than {} s of CPU (the CPU budget), or was killed for memory",
                budget.cpu.as_secs()
            )
        } else if err.contains("overflowed its stack") {
            "compiling overflowed the compiler's stack".to_owned()
        } else {
            format!("the compiler crashed (signal {signal}): {err}")
        },
    ))
}

/// The `compile-worker` subcommand: reads a component on standard input, compiles it for the
/// host's engine settings and writes the serialized code to standard output. Exits with code 3
/// and the reason on standard error when the component does not compile.
pub fn worker_main() -> i32 {
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        eprintln!("reading the component: {e}");
        return EXIT_COMPILE_ERROR;
    }
    let engine = match super::engine::worker_engine() {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_COMPILE_ERROR;
        }
    };
    match engine.precompile_component(&bytes) {
        Ok(compiled) => match std::io::stdout().lock().write_all(&compiled) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("writing the compiled code: {e}");
                EXIT_COMPILE_ERROR
            }
        },
        Err(e) => {
            eprintln!("{e:#}");
            EXIT_COMPILE_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module with `functions` functions of `body` `nop`s each, encoded by hand.
    pub(crate) fn module(functions: u32, body: u32) -> Vec<u8> {
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
        fn section(id: u8, content: &[u8], out: &mut Vec<u8>) {
            out.push(id);
            leb(content.len() as u32, out);
            out.extend_from_slice(content);
        }
        let mut out = b"\0asm\x01\0\0\0".to_vec();
        // One type, `func () -> ()`.
        section(1, &[1, 0x60, 0, 0], &mut out);
        let mut funcs = Vec::new();
        leb(functions, &mut funcs);
        funcs.extend(std::iter::repeat_n(0, functions as usize));
        section(3, &funcs, &mut out);
        let mut code = Vec::new();
        leb(functions, &mut code);
        for _ in 0..functions {
            // No locals, the nops, `end`.
            leb(body + 2, &mut code);
            code.push(0);
            code.extend(std::iter::repeat_n(0x01, body as usize));
            code.push(0x0b);
        }
        section(10, &code, &mut out);
        out
    }

    #[test]
    fn shape_should_count_functions_and_the_largest_body() {
        let shape = check_shape("t", "d", &module(3, 10), &CompileBudget::default()).unwrap();
        assert_eq!((shape.modules, shape.functions), (1, 3));
        // A body of ten `nop`s: the local count, ten opcodes and `end`.
        assert_eq!(shape.largest_function, 12);
        let engine = wasmtime::Engine::default();
        wasmtime::Module::new(&engine, module(3, 10)).expect("the hand-made module is valid");
    }

    #[test]
    fn shape_should_refuse_too_many_functions_naming_the_cap() {
        let budget = CompileBudget {
            max_functions: 2,
            ..CompileBudget::default()
        };
        let err = check_shape("hostile", "abc", &module(3, 1), &budget).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("hostile") && text.contains("more than 2 functions"),
            "{text}"
        );
    }

    #[test]
    fn shape_should_refuse_a_body_over_the_cap() {
        let budget = CompileBudget {
            max_function_bytes: 100,
            ..CompileBudget::default()
        };
        let err = check_shape("hostile", "abc", &module(1, 200), &budget).unwrap_err();
        assert!(
            err.to_string().contains("202 bytes, over the cap of 100"),
            "{err}"
        );
    }

    #[test]
    fn a_killed_worker_should_read_as_over_the_wall_clock_budget() {
        let budget = CompileBudget::default();
        match judge(None, Ok(Vec::new()), String::new(), &budget) {
            Err(WorkerFailure::Budget(what)) => assert!(what.contains("180 s"), "{what}"),
            _ => panic!("not a budget failure"),
        }
    }
}
