//! A `/rpc` request body as a client sends it: the JSON-RPC envelope
//! (`decode_call_limited`, with a small and the default nesting bound),
//! then every method's params parser on whatever `params` it carried, and
//! the extension names of a `registerDriver`. Errors are answers; nothing
//! may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::jsonrpc::*;

fuzz_target!(|data: &[u8]| {
    for depth in [4, 64] {
        let Ok(call) = decode_call_limited(data, depth) else {
            continue;
        };
        let p = &call.params;
        let _ = call.result_frame("{}");
        let _ = call.error_frame(-32602, "x");
        let _ = SendMessageParams::parse(p);
        let _ = idempotency_key(p);
        let _ = CompactParams::parse(p);
        let _ = SubscribeParams::parse(p);
        let _ = UpdateClientToolsParams::parse(p);
        let _ = StartRemoteSandboxParams::parse(p);
        let _ = ExecRemoteSandboxParams::parse(p);
        if let Ok(r) = ReportLocalSandboxParams::parse(p) {
            let _ = (r.event_type(), r.payload());
        }
        if let Ok(r) = ReportLocalSubagentParams::parse(p) {
            let _ = (r.event_type(), r.payload());
        }
        let _ = CancelSubagentParams::parse(p);
        if let Some(names) = p.get("extensions").and_then(|v| v.as_array()) {
            for n in names.iter().filter_map(|n| n.as_str()) {
                let _ = Extension::parse(n);
            }
        }
    }
});
