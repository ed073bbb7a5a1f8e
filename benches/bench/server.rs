//! The redis-server the benchmark starts, pinned to CPU 1.

#[allow(unused_imports)]
use crate::*;

// The server: started here, killed (and its directory removed) when dropped, also on panic.

pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) dir: PathBuf,
    pub(crate) port: u16,
}

impl Server {
    pub(crate) fn start(module: &Path, pin: bool) -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("find a free port")
            .port();
        let dir = std::env::temp_dir().join(format!("redis-lock-bench-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the server's directory");
        let mut cmd = if pin {
            let mut c = Command::new("taskset");
            c.args(["-c", "1", "redis-server"]);
            c
        } else {
            Command::new("redis-server")
        };
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            // Pub/sub waiters that do not read for a while must not be disconnected.
            .args(["--client-output-buffer-limit", "pubsub 0 0 0"])
            .arg("--loadmodule")
            .arg(module)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().expect("start redis-server");
        let mut server = Server { child, dir, port };
        server.wait_ready();
        server
    }

    pub(crate) fn wait_ready(&mut self) {
        let began = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("redis-server exited ({status}):\n{}", self.log());
            }
            if let Ok(mut con) = self.try_connect() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return;
                }
            }
            if began.elapsed() > Duration::from_secs(10) {
                panic!("redis-server did not answer within 10 s:\n{}", self.log());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    pub(crate) fn try_connect(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let con = client.get_connection_with_timeout(Duration::from_secs(5))?;
        // A module that never replies fails the run instead of hanging it.
        con.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(con)
    }

    /// A connection, retried for a while (the server may be busy with a FLUSHALL).
    pub(crate) fn connect(&self) -> Connection {
        let mut last = None;
        for _ in 0..50 {
            match self.try_connect() {
                Ok(con) => return con,
                Err(e) => last = Some(e),
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("cannot connect to redis-server: {last:?}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
