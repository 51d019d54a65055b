//! A `tinymq consume` child process whose stdout lines (and stderr) are collected as they
//! arrive, for tests that stop it with signals or watch it ride out failures.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Consume {
    pub child: Child,
    printed: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    /// While held, the stdout reader of a gated consumer has stopped reading.
    gate: Option<mpsc::Sender<()>>,
    /// The threads reading stdout and stderr; each ends at its pipe's EOF.
    stdout_reader: Option<std::thread::JoinHandle<()>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Consume {
    /// Spawns `command` (a `tinymq consume …` command line).
    pub fn start(command: Command) -> Consume {
        let mut c = Consume::start_gated(command, usize::MAX);
        c.release();
        c
    }

    /// Like [`Consume::start`], but stops reading its stdout after `lines` lines until
    /// [`Consume::release`]: once the pipe is full the process is blocked writing, i.e. still
    /// printing, whatever happens to it meanwhile (a signal, say).
    pub fn start_gated(mut command: Command, lines: usize) -> Consume {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn consume");
        let printed = Arc::new(Mutex::new(Vec::new()));
        let (out, sink) = (child.stdout.take().expect("stdout"), printed.clone());
        let (gate, closed) = mpsc::channel::<()>();
        let stdout_reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let mut sink = sink.lock().unwrap();
                sink.push(line);
                if sink.len() == lines {
                    drop(sink);
                    // Returns once the gate's sender is dropped.
                    let _ = closed.recv();
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut err, sink) = (child.stderr.take().expect("stderr"), stderr.clone());
        let stderr_reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = err.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        Consume {
            child,
            printed,
            stderr,
            gate: Some(gate),
            stdout_reader: Some(stdout_reader),
            stderr_reader: Some(stderr_reader),
        }
    }

    /// Lets a gated consumer's stdout be read again.
    pub fn release(&mut self) {
        self.gate = None;
    }

    /// Sends `signal` without waiting for the process to exit.
    pub fn send(&self, signal: i32) {
        // SAFETY: sending a signal to our own child process.
        let rc = unsafe { libc::kill(self.child.id() as i32, signal) };
        assert_eq!(rc, 0, "kill");
    }

    /// The printed lines once no new line has arrived for a second (bounded wait), so that a
    /// late record (a duplicate, say) shows up before the caller compares.
    pub fn settled(&self) -> Vec<String> {
        let mut seen = self.printed().len();
        for _ in 0..60 {
            std::thread::sleep(Duration::from_secs(1));
            let now = self.printed().len();
            if now == seen {
                return self.printed();
            }
            seen = now;
        }
        panic!("still printing after a minute ({seen} lines)");
    }

    pub fn printed(&self) -> Vec<String> {
        self.printed.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (bounded) until its stderr contains `text` (the note a signal's handling prints,
    /// say).
    pub fn wait_stderr(&self, text: &str) {
        for _ in 0..3000 {
            if self.stderr().contains(text) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("stderr never said {text:?}: {}", self.stderr());
    }

    /// Waits (bounded) until a gated consumer is blocked writing to its full stdout pipe: one of
    /// its threads sleeps in the kernel's pipe write (`/proc/PID/task/*/wchan`).
    pub fn wait_stuck_printing(&self) {
        let tasks = format!("/proc/{}/task", self.child.id());
        let stuck = || {
            std::fs::read_dir(&tasks)
                .into_iter()
                .flatten()
                .flatten()
                .any(|task| {
                    std::fs::read_to_string(task.path().join("wchan"))
                        .is_ok_and(|wchan| wchan.contains("pipe_write"))
                })
        };
        for _ in 0..1000 {
            if stuck() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the consumer never blocked writing to its stdout");
    }

    /// Waits (bounded) until at least `n` lines were printed.
    pub fn wait_printed(&self, n: usize) {
        for _ in 0..1200 {
            if self.printed().len() >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "printed only {} of {n} lines; stderr: {}",
            self.printed().len(),
            self.stderr()
        );
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    pub fn signal(&mut self, signal: i32) -> ExitStatus {
        self.send(signal);
        self.wait()
    }

    /// Waits (bounded) for the process to exit.
    pub fn wait(&mut self) -> ExitStatus {
        for _ in 0..1200 {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // The pipes are at EOF once it has exited: the readers collect the last lines
                // and end (a gated stdout reader only once released, so it is not waited for).
                if self.gate.is_none() {
                    if let Some(reader) = self.stdout_reader.take() {
                        reader.join().expect("stdout reader");
                    }
                }
                if let Some(reader) = self.stderr_reader.take() {
                    reader.join().expect("stderr reader");
                }
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("consume did not exit");
    }
}

impl Drop for Consume {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
