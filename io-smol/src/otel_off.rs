//! A build without the `otel` feature: `[telemetry] enabled = true` is an
//! exporter initialisation failure (spec 04 §3.3, exit 2).

use engine::Engine;

use crate::config::{ConfigError, Telemetry};

/// Never constructed in this build.
pub enum Exporter {}

pub fn init(
    tel: &Telemetry,
    _headers: Vec<(String, String)>,
    _otel_log: &str,
) -> Result<Option<Exporter>, ConfigError> {
    match tel.enabled {
        false => Ok(None),
        true => Err(ConfigError::Telemetry(
            "[telemetry] enabled = true, but this build has no OpenTelemetry exporter \
             (built without the `otel` feature)"
                .into(),
        )),
    }
}

impl Exporter {
    pub fn pump(&mut self, _engine: &mut Engine) {
        match *self {}
    }

    pub fn next_due(&self) -> Option<std::time::Instant> {
        match *self {}
    }

    pub fn shutdown(self, _engine: &mut Engine, _budget: std::time::Duration) {
        match self {}
    }
}
