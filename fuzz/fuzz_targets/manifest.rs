#![no_main]

#[global_allocator]
static ALLOC: diskvec_fuzz::alloc::CountingAlloc = diskvec_fuzz::alloc::CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| diskvec_fuzz::manifest(data));
