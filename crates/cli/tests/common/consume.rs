//! A `tinymq consume` child process whose stdout lines (and stderr) are collected as they
//! arrive, for tests that stop it with signals or watch it ride out failures.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Consume {
    pub child: Child,
    printed: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl Consume {
    /// Spawns `command` (a `tinymq consume …` command line).
    pub fn start(mut command: Command) -> Consume {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn consume");
        let printed = Arc::new(Mutex::new(Vec::new()));
        let (out, sink) = (child.stdout.take().expect("stdout"), printed.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut err, sink) = (child.stderr.take().expect("stderr"), stderr.clone());
        std::thread::spawn(move || {
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
        }
    }

    pub fn printed(&self) -> Vec<String> {
        self.printed.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
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
        // SAFETY: sending a signal to our own child process.
        let rc = unsafe { libc::kill(self.child.id() as i32, signal) };
        assert_eq!(rc, 0, "kill");
        self.wait()
    }

    /// Waits (bounded) for the process to exit.
    pub fn wait(&mut self) -> ExitStatus {
        for _ in 0..1200 {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Let the reader threads collect the last lines.
                std::thread::sleep(Duration::from_millis(100));
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
