//! Any byte string fed to the decoder and the analyser: errors are fine, panics, hangs and
//! large allocations are bugs. Seed the corpus with testdata/captures/*.pcap.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut dec) = wire::Decoder::new(data, wire::FlowFilter::default()) else { return };
    let mut flows: Vec<analyze::FlowAnalyzer> = Vec::new();
    while let Ok(Some(fe)) = dec.next_event() {
        let i = fe.flow.0 as usize;
        while flows.len() <= i {
            flows.push(analyze::FlowAnalyzer::new(analyze::Config::default()));
        }
        flows[i].push(&fe.event);
    }
    for f in flows {
        let _ = f.finish();
    }
    // The link decoder alone, on every link type it knows.
    for lt in [0u32, 1, 9, 10, 12, 14, 50, 51, 101, 104, 105, 108, 113, 127, 228, 229, 239, 276] {
        let _ = wire::decode(lt, data, data.len() as u32);
    }
});
