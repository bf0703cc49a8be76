//! Process figures for `GET /metrics`, read from `/proc/self` (zeros where
//! `/proc` is not mounted).

pub struct Figures {
    pub rss_bytes: u64,
    pub open_fds: u64,
}

pub fn read() -> Figures {
    Figures {
        rss_bytes: rss_bytes().unwrap_or(0),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count() as u64)
            .unwrap_or(0),
    }
}

/// `VmRSS` of `/proc/self/status` (kB), in bytes.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_memory_and_descriptors() {
        let f = super::read();
        assert!(f.rss_bytes > 1024 * 1024, "{}", f.rss_bytes);
        assert!(f.open_fds >= 3, "{}", f.open_fds);
    }
}
