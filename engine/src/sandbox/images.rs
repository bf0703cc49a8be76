//! Image provisioning (spec 03 §4.8) and the per-profile status the admin
//! `sandbox-status` endpoint and `session.sandbox.available` report.

use std::collections::VecDeque;

use serde_json::{json, Value};

use super::{DriverError, ImageState, Op, SandboxCommand, SandboxHub, SandboxNotice};

impl SandboxHub {
    /// The first image of `images` was ensured: record it, go on.
    pub(super) fn provisioned(
        &mut self,
        profile_id: String,
        mut images: VecDeque<String>,
        r: Result<(), DriverError>,
    ) {
        let Some(image) = images.pop_front() else {
            return;
        };
        let state = match &r {
            Ok(()) => ImageState::Available,
            Err(e) => ImageState::Error(e.detail().to_string()),
        };
        if let Some(list) = self.images.get_mut(&profile_id) {
            for (_, s) in list.iter_mut().filter(|(n, _)| *n == image) {
                *s = state.clone();
            }
        }
        self.notices.push_back(SandboxNotice::Provisioned {
            profile_id: profile_id.clone(),
            image,
            result: r,
        });
        self.next_provision(profile_id, images);
    }

    /// A profile was created or replaced (or the server started): every
    /// listed image is `pending`, then ensured in order in the background.
    pub fn provision(&mut self, profile_id: &str, images: &[String]) {
        if images.is_empty() {
            self.images.remove(profile_id);
            return;
        }
        let list = images
            .iter()
            .map(|i| (i.clone(), ImageState::Pending))
            .collect();
        self.images.insert(profile_id.to_string(), list);
        self.next_provision(profile_id.to_string(), images.iter().cloned().collect());
    }

    pub(super) fn next_provision(&mut self, profile_id: String, images: VecDeque<String>) {
        let Some(image) = images.front().cloned() else {
            return;
        };
        let op = self.op(Op::Provision { profile_id, images });
        self.commands
            .push_back(SandboxCommand::EnsureImage { op, image });
    }

    /// Status of `image` for the profile (`pending` when never recorded).
    pub fn image_state(&self, profile_id: &str, image: &str) -> ImageState {
        self.images
            .get(profile_id)
            .and_then(|l| l.iter().find(|(n, _)| n == image))
            .map_or(ImageState::Pending, |(_, s)| s.clone())
    }

    /// `{"name","status"[,"detail"]}` for an image.
    pub fn image_json(&self, profile_id: &str, image: &str) -> Value {
        match self.image_state(profile_id, image) {
            ImageState::Pending => json!({"name": image, "status": "pending"}),
            ImageState::Available => json!({"name": image, "status": "available"}),
            ImageState::Error(d) => json!({"name": image, "status": "error", "detail": d}),
        }
    }
}
