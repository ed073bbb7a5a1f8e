//! The worker processes of both languages: started, killed with `kill -9` and replaced,
//! paused with SIGSTOP past their lease, and their summaries read at the end.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Lang {
    Rust,
    Python,
}

impl Lang {
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Lang::Rust => "rs",
            Lang::Python => "py",
        }
    }

    pub(crate) fn of(id: &str) -> Option<Lang> {
        match id.split('-').next() {
            Some("rs") => Some(Lang::Rust),
            Some("py") => Some(Lang::Python),
            _ => None,
        }
    }
}

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python of the client's test venv (redis-py 8.1.0), made by `run-tests.sh` if missing;
/// `Err(why)` when there is no python3 to make it with. Looked for once per process.
pub(crate) fn python() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON.get_or_init(find_python).clone()
}

pub(crate) fn find_python() -> Result<PathBuf, String> {
    let venv_python = repo().join("target/clients/python-redis-8.1.0/bin/python");
    if venv_python.exists() {
        return Ok(venv_python);
    }
    let probe = Command::new("python3").arg("--version").output();
    if !probe.is_ok_and(|o| o.status.success()) {
        return Err("python3 is unavailable".into());
    }
    let made = Command::new("bash")
        .arg(repo().join("clients/python/run-tests.sh"))
        .args(["--venv-only", "8.1.0"])
        .stdout(Stdio::null())
        .status();
    if venv_python.exists() {
        Ok(venv_python)
    } else {
        Err(format!(
            "clients/python/run-tests.sh did not make {} ({made:?})",
            venv_python.display()
        ))
    }
}

pub(crate) struct Worker {
    pub(crate) id: String,
    pub(crate) lang: Lang,
    pub(crate) child: Child,
    /// Paused once already (such workers are neither killed nor paused again, so that each
    /// paused holder's summary is read at the end).
    pub(crate) paused: bool,
    pub(crate) rogue: Option<&'static str>,
}

/// The workers of one run, all ending at `end`.
pub(crate) struct Fleet {
    pub(crate) port: u16,
    pub(crate) python: Option<PathBuf>,
    pub(crate) keys: u32,
    pub(crate) end: Instant,
    pub(crate) live: Vec<Worker>,
    pub(crate) next: HashMap<Lang, usize>,
    /// Summary lines of the workers that finished, by id.
    pub(crate) summaries: HashMap<String, HashMap<String, u64>>,
    pub(crate) killed: HashMap<Lang, usize>,
    pub(crate) hung: Vec<String>,
}

impl Fleet {
    pub(crate) fn new(
        server: &Server,
        python: Option<PathBuf>,
        keys: u32,
        run_for: Duration,
    ) -> Fleet {
        Fleet {
            port: server.port,
            python,
            keys,
            end: Instant::now() + run_for,
            live: Vec::new(),
            next: HashMap::new(),
            summaries: HashMap::new(),
            killed: HashMap::new(),
            hung: Vec::new(),
        }
    }

    /// Starts a worker of `lang` (half of them on RESP3) for the time left.
    pub(crate) fn spawn(&mut self, lang: Lang, rogue: Option<&'static str>) {
        let n = self.next.entry(lang).or_insert(0);
        *n += 1;
        let id = format!("{}-{n}", lang.prefix());
        let resp3 = n.is_multiple_of(2);
        let left = self.end.saturating_duration_since(Instant::now());
        let mut args = vec![
            "--id".to_string(),
            id.clone(),
            "--duration-ms".into(),
            left.as_millis().max(1).to_string(),
            "--keys".into(),
            self.keys.to_string(),
            "--ttl-ms".into(),
            TTL.as_millis().to_string(),
            "--wait-ms".into(),
            "2000".into(),
        ];
        if let Some(mode) = rogue {
            args.extend(["--rogue".into(), mode.into()]);
        }
        let url = format!("redis://127.0.0.1:{}/", self.port);
        let mut cmd = match lang {
            Lang::Rust => {
                let url = if resp3 {
                    format!("{url}?protocol=resp3")
                } else {
                    url
                };
                args.extend(["--url".into(), url]);
                let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
                cmd.args([
                    "exclusion_worker_entry",
                    "--exact",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(WORKER_ENV, args.join(" "));
                cmd
            }
            Lang::Python => {
                let python = self.python.as_ref().expect("python");
                args.extend([
                    "--url".into(),
                    url,
                    "--protocol".into(),
                    if resp3 { "3" } else { "2" }.into(),
                ]);
                let mut cmd = Command::new(python);
                cmd.arg("-u")
                    .arg(repo().join("clients/python/tests/exclusion_worker.py"))
                    .args(&args)
                    // The library as it is in the tree, not as last installed into the venv.
                    .env("PYTHONPATH", repo().join("clients/python/src"))
                    .env("PYTHONDONTWRITEBYTECODE", "1");
                cmd
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn worker");
        self.live.push(Worker {
            id,
            lang,
            child,
            paused: false,
            rogue,
        });
    }

    pub(crate) fn index_of(&self, id: &str) -> Option<usize> {
        self.live.iter().position(|w| w.id == id)
    }

    /// `kill -9` of the worker at `i`, and a new one of its language in its place.
    pub(crate) fn kill_and_replace(&mut self, i: usize) -> String {
        let mut w = self.live.swap_remove(i);
        w.child.kill().expect("kill -9");
        let _ = w.child.wait();
        *self.killed.entry(w.lang).or_insert(0) += 1;
        self.spawn(w.lang, None);
        w.id
    }

    /// Reaps the workers that exited, keeping their summaries; kills those still running
    /// at `until`. Waits for all.
    pub(crate) fn finish(&mut self, until: Instant) {
        while !self.live.is_empty() {
            let mut i = 0;
            while i < self.live.len() {
                let done = self.live[i].child.try_wait().expect("try_wait").is_some();
                if done || Instant::now() >= until {
                    let mut w = self.live.swap_remove(i);
                    if !done {
                        self.hung.push(w.id.clone());
                        let _ = w.child.kill();
                    }
                    let status = w.child.wait().expect("wait");
                    let mut out = String::new();
                    let _ = w
                        .child
                        .stdout
                        .take()
                        .expect("stdout")
                        .read_to_string(&mut out);
                    // (After libtest's `test exclusion_worker_entry ... ` on the same line.)
                    let summary = out
                        .lines()
                        .find_map(|l| Some(&l[l.find("SUMMARY ")? + 8..]));
                    match summary {
                        Some(line) => {
                            let fields = line
                                .split_whitespace()
                                .filter_map(|kv| kv.split_once('='))
                                .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                                .collect();
                            self.summaries.insert(w.id.clone(), fields);
                        }
                        None if done => panic!("{} exited ({status}) without a summary", w.id),
                        None => {}
                    }
                } else {
                    i += 1;
                }
            }
            sleep(Duration::from_millis(20));
        }
    }

    /// The sum of a summary field over the finished workers of `lang` (all with `None`).
    pub(crate) fn total(&self, field: &str, lang: Option<Lang>) -> u64 {
        self.summaries
            .iter()
            .filter(|(id, _)| lang.is_none() || Lang::of(id) == lang)
            .map(|(_, s)| s.get(field).copied().unwrap_or(0))
            .sum()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for w in &mut self.live {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

pub(crate) fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a child of this process that has not been reaped.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

/// The worker that holds `{res:n}:lock` now, by the lock's fence and the owner it wrote under
/// that fence: (its id, the fence).
pub(crate) fn holder_of(
    server: &Server,
    con: &mut redis::Connection,
    n: u32,
) -> Option<(String, u64)> {
    let owner: Option<String> = redis::cmd("GET")
        .arg(format!("{{res:{n}}}:owner"))
        .query(con)
        .ok()?;
    let (fence, id) = owner?
        .split_once(' ')
        .map(|(f, id)| (f.parse().ok(), id.to_string()))?;
    let info = Mutex::new(server.client(), format!("{{res:{n}}}:lock"))
        .info()
        .ok()??;
    (info.mode == Mode::Exclusive && info.holder.is_some() && Some(info.fence) == fence)
        .then_some((id, info.fence))
}
