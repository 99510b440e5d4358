//! Serving: a fixed set of search workers fed from one queue, the way a server runs the
//! disk index. Each worker interleaves up to `queries_per_thread` queries on its own read
//! engine and picks up new arrivals as slots free, so many concurrent callers share a few
//! threads and keep the device busy instead of each blocking a thread of its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::search::{Accept, Fetch, QueryFeed, QueryRequest};
use super::{DiskIndex, SearchParams, SearchResult};
use crate::{IndexError, Result};

struct Request {
    vector: Vec<f32>,
    params: SearchParams,
    accept: Option<Accept>,
    reply: Sender<Result<SearchResult>>,
}

/// Search workers over a shared index; `search` may be called from any number of threads.
pub struct SearchService {
    index: Arc<DiskIndex>,
    params: SearchParams,
    queue: Option<Sender<Request>>,
    workers: Vec<JoinHandle<()>>,
}

impl SearchService {
    /// Starts `threads` workers searching with `params`.
    pub fn start(index: Arc<DiskIndex>, params: SearchParams, threads: usize) -> Result<Self> {
        let params = index.check_params(&params)?;
        crate::limits::THREADS.check(threads)?;
        let (queue, requests) = crossbeam_channel::unbounded::<Request>();
        let depth = super::search::engine_depth(&params);
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let engine = index.take_engine(depth)?;
            let index = Arc::clone(&index);
            let requests = requests.clone();
            // Named so that a profile or a per-thread CPU count tells searches from builds.
            let spawned = std::thread::Builder::new()
                .name("search".into())
                .spawn(move || worker(&index, requests, params, engine))
                .map_err(|e| IndexError::SearchFailed(format!("no search thread: {e}")))?;
            workers.push(spawned);
        }
        Ok(Self {
            index,
            params,
            queue: Some(queue),
            workers,
        })
    }

    pub fn index(&self) -> &DiskIndex {
        &self.index
    }

    /// Searches one query with the service's parameters and waits for its answer.
    pub fn search(&self, query: &[f32]) -> Result<SearchResult> {
        self.search_where(query, &self.params, None)
    }

    /// Searches one query with its own k, search list and beam width (a beam wider than
    /// the service's is narrowed to it), returning only ids `accept` takes.
    pub fn search_where(
        &self,
        query: &[f32],
        params: &SearchParams,
        accept: Option<Accept>,
    ) -> Result<SearchResult> {
        self.submit(query, params, accept)?.wait()
    }

    /// Queues one query like [`search_where`](Self::search_where) without waiting, so one
    /// caller can keep many queries in flight (a batch, or one query over many indexes).
    pub fn submit(
        &self,
        query: &[f32],
        params: &SearchParams,
        accept: Option<Accept>,
    ) -> Result<PendingSearch> {
        self.index.check_queries(query, query.len())?;
        let params = self.index.check_params(params)?;
        let (reply, answer) = crossbeam_channel::bounded(1);
        let request = Request {
            vector: query.to_vec(),
            params,
            accept,
            reply,
        };
        self.queue
            .as_ref()
            .and_then(|q| q.send(request).ok())
            .ok_or_else(|| IndexError::SearchFailed("the search service has stopped".into()))?;
        Ok(PendingSearch(answer))
    }
}

/// A query queued on a [`SearchService`].
pub struct PendingSearch(Receiver<Result<SearchResult>>);

impl PendingSearch {
    /// Waits for the answer.
    pub fn wait(self) -> Result<SearchResult> {
        self.0
            .recv()
            .map_err(|_| IndexError::SearchFailed("a search worker stopped".into()))?
    }
}

impl Drop for SearchService {
    fn drop(&mut self) {
        self.queue.take();
        let me = std::thread::current().id();
        for w in self.workers.drain(..) {
            // The last owner may be a worker of this very service (a query's `accept` can
            // own what owns the service): that one is left to finish on its own, as
            // joining itself would fail. Every worker returns once the queue is closed.
            if w.thread().id() != me {
                let _ = w.join();
            }
        }
    }
}

struct ServiceFeed {
    requests: Receiver<Request>,
    pending: HashMap<usize, Sender<Result<SearchResult>>>,
    next_tag: usize,
}

impl ServiceFeed {
    fn accept(&mut self, r: Request) -> Fetch {
        let tag = self.next_tag;
        self.next_tag += 1;
        self.pending.insert(tag, r.reply);
        Fetch::Query(QueryRequest {
            tag,
            vector: r.vector,
            params: r.params,
            accept: r.accept,
        })
    }
}

impl QueryFeed for ServiceFeed {
    fn next(&mut self, wait: bool) -> Fetch {
        if wait {
            return match self.requests.recv() {
                Ok(r) => self.accept(r),
                Err(_) => Fetch::Closed,
            };
        }
        match self.requests.try_recv() {
            Ok(r) => self.accept(r),
            Err(TryRecvError::Empty) => Fetch::Empty,
            Err(TryRecvError::Disconnected) => Fetch::Closed,
        }
    }

    fn deliver(&mut self, tag: usize, result: Result<SearchResult>) {
        if let Some(reply) = self.pending.remove(&tag) {
            let _ = reply.send(result);
        }
    }
}

fn worker(
    index: &DiskIndex,
    requests: Receiver<Request>,
    params: SearchParams,
    mut engine: Box<dyn diskvec_io::ReadEngine>,
) {
    let mut feed = ServiceFeed {
        requests,
        pending: HashMap::new(),
        next_tag: 0,
    };
    // A failed read fails its own query inside `serve`; an error of the engine itself
    // fails the queries this worker had in flight, not the service.
    while let Err(e) = index.serve(&mut feed, &params, engine.as_mut()) {
        let message = e.to_string();
        for (_, reply) in feed.pending.drain() {
            let _ = reply.send(Err(IndexError::SearchFailed(message.clone())));
        }
        if engine.in_flight() > 0 {
            // The engine could not be drained: replace it (dropping it waits for the
            // kernel, or leaks its buffers, never frees them under a read).
            match index.take_engine(super::search::engine_depth(&params)) {
                Ok(fresh) => engine = fresh,
                Err(_) => return,
            }
        }
    }
    index.return_engine(engine);
}
