//! Publishes to a JetStream stream of 3 replicas and times each acknowledgement.
//! `natsbench URL[,URL...]` prints one JSON object: case -> {per_s, p50_ms, p99_ms}.

use std::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let urls = std::env::args()
        .nth(1)
        .ok_or("usage: natsbench URL[,URL...]")?;
    let servers: Vec<async_nats::ServerAddr> =
        urls.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let client = async_nats::connect(servers).await?;
    let js = async_nats::jetstream::new(client);
    js.get_or_create_stream(async_nats::jetstream::stream::Config {
        name: "rust".into(),
        subjects: vec!["rust.>".into()],
        num_replicas: 3,
        ..Default::default()
    })
    .await?;
    let mut out = serde_json::Map::new();
    for (size, label, count) in [(1024usize, "1KiB", 2000usize), (300 * 1024, "300KiB", 200)] {
        let body: bytes::Bytes = vec![7u8; size].into();
        for publishers in [1usize, 4, 16] {
            let started = Instant::now();
            let tasks = (0..publishers).map(|_| {
                let js = js.clone();
                let body = body.clone();
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    for _ in 0..count / publishers {
                        let t = Instant::now();
                        js.publish("rust.w", body.clone()).await?.await?;
                        latencies.push(t.elapsed().as_secs_f64());
                    }
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(latencies)
                })
            });
            let mut all = Vec::new();
            for t in futures::future::join_all(tasks).await {
                all.extend(t??);
            }
            let seconds = started.elapsed().as_secs_f64();
            all.sort_by(f64::total_cmp);
            out.insert(
                format!("async-nats R3 {label} x{publishers}"),
                serde_json::json!({
                    "per_s": (all.len() as f64 / seconds * 10.0).round() / 10.0,
                    "p50_ms": (all[all.len() / 2] * 1e6).round() / 1e3,
                    "p99_ms": (all[all.len() * 99 / 100] * 1e6).round() / 1e3,
                }),
            );
        }
    }
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}
