//! Remote devices: one [`RpcDevice`] per device of a server, with its
//! buffer type, buffers and execution stream, all speaking to the server
//! through one [`Conn`].

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use ggml_core::{
    Backend, Buffer, BufferCommon, BufferType, BufferUsage, Device, DeviceCaps, DeviceKind,
    DeviceProps, Graph, Placement, TensorDesc, TensorId, Type,
};

use crate::conn::Conn;
use crate::error::RpcError;
use crate::graph_encode;
use crate::proto::{self, Cmd, RpcTensor, HASH_THRESHOLD, MAX_SRC, RPC_TENSOR_SIZE};

type CoreResult<T> = ggml_core::Result<T>;

fn u64le(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i * 8..i * 8 + 8]);
    u64::from_le_bytes(a)
}

/// A device of a remote server.
pub struct RpcDevice {
    me: Weak<RpcDevice>,
    conn: Arc<Conn>,
    index: u32,
    name: String,
    buft: Arc<RpcBufferType>,
}

impl RpcDevice {
    /// Creates device `index` of the server behind `conn`, named `name`.
    pub fn new(conn: Arc<Conn>, index: u32, name: String) -> crate::Result<Arc<RpcDevice>> {
        let dev = index.to_le_bytes();
        let alignment = u64le(&conn.call(Cmd::GetAlignment, &dev, Some(8))?, 0);
        let max_size = u64le(&conn.call(Cmd::GetMaxSize, &dev, Some(8))?, 0);
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(RpcError::Malformed(format!(
                "{}: alignment {alignment} is not a power of two",
                conn.endpoint()
            )));
        }
        let buft = Arc::new_cyclic(|me| RpcBufferType {
            me: me.clone(),
            conn: conn.clone(),
            device: index,
            name: format!("{name}[{}]", conn.endpoint()),
            alignment: alignment as usize,
            max_size: usize::try_from(max_size).unwrap_or(usize::MAX),
            alloc_sizes: Mutex::new(HashMap::new()),
        });
        Ok(Arc::new_cyclic(|me| RpcDevice {
            me: me.clone(),
            conn,
            index,
            name,
            buft,
        }))
    }

    /// The server connection.
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }
}

impl Device for RpcDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> String {
        self.conn.endpoint().to_string()
    }

    fn props(&self) -> DeviceProps {
        let (free, total) = self
            .conn
            .call(Cmd::GetDeviceMemory, &self.index.to_le_bytes(), Some(16))
            .map(|r| (u64le(&r, 0) as usize, u64le(&r, 1) as usize))
            .unwrap_or((0, 0));
        DeviceProps {
            name: self.name.clone(),
            description: self.description(),
            kind: DeviceKind::Gpu,
            memory_free: free,
            memory_total: total,
            caps: DeviceCaps::default(),
        }
    }

    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }

    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        graph_encode::encodable(graph, node)
    }

    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        buft.name() == self.buft.name
    }

    fn init_backend(&self) -> CoreResult<Box<dyn Backend>> {
        let me = self
            .me
            .upgrade()
            .ok_or_else(|| ggml_core::Error::Invalid(format!("{}: device dropped", self.name)))?;
        Ok(Box::new(RpcBackend {
            dev: me,
            last: None,
        }))
    }
}

/// The memory of one remote device.
pub struct RpcBufferType {
    me: Weak<RpcBufferType>,
    conn: Arc<Conn>,
    device: u32,
    name: String,
    alignment: usize,
    max_size: usize,
    alloc_sizes: Mutex<HashMap<(Type, [usize; 4]), usize>>,
}

impl BufferType for RpcBufferType {
    fn name(&self) -> &str {
        &self.name
    }

    fn alignment(&self) -> usize {
        self.alignment
    }

    fn max_size(&self) -> usize {
        self.max_size
    }

    fn alloc_size(&self, desc: &TensorDesc) -> usize {
        let nbytes = desc.nbytes();
        // Backends may pad quantized rows (CUDA pads to 512): ask the server,
        // as llama.cpp's client does, once per type and shape.
        if !desc.ty.is_quantized() || desc.ne[0] % 512 == 0 {
            return nbytes;
        }
        let key = (desc.ty, desc.ne);
        let mut cache = self.alloc_sizes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&n) = cache.get(&key) {
            return n.max(nbytes);
        }
        let Ok(t) = graph_encode::plain_tensor(desc, 0, 0) else {
            return nbytes;
        };
        let mut body = self.device.to_le_bytes().to_vec();
        t.encode(&mut body);
        body.resize(4 + (1 + MAX_SRC) * RPC_TENSOR_SIZE, 0);
        match self.conn.call(Cmd::GetAllocSize, &body, Some(8)) {
            Ok(r) => {
                let n = u64le(&r, 0) as usize;
                cache.insert(key, n);
                n.max(nbytes)
            }
            Err(_) => nbytes,
        }
    }

    fn is_host(&self) -> bool {
        false
    }

    fn alloc_buffer(&self, size: usize) -> CoreResult<Arc<dyn Buffer>> {
        let alloc_err = |reason: String| ggml_core::Error::Alloc {
            name: self.name.clone(),
            size,
            reason,
        };
        let mut body = self.device.to_le_bytes().to_vec();
        body.extend_from_slice(&(size as u64).to_le_bytes());
        let r = self
            .conn
            .call(Cmd::AllocBuffer, &body, Some(16))
            .map_err(|e| alloc_err(e.to_string()))?;
        let (handle, remote_size) = (u64le(&r, 0), u64le(&r, 1));
        if handle == 0 {
            return Err(alloc_err(
                "the server could not allocate it (out of memory, or past its --mem limit)".into(),
            ));
        }
        let base = self
            .conn
            .call(Cmd::BufferGetBase, &handle.to_le_bytes(), Some(8))
            .map_err(|e| alloc_err(e.to_string()))?;
        let buft = self
            .me
            .upgrade()
            .ok_or_else(|| alloc_err("buffer type dropped".into()))?;
        Ok(Arc::new(RpcBuffer {
            common: BufferCommon::new(buft.clone(), remote_size as usize, BufferUsage::Any),
            buft,
            handle,
            base: u64le(&base, 0),
        }))
    }

    fn device_name(&self) -> Option<String> {
        self.name.split('[').next().map(str::to_string)
    }
}

/// A buffer on a remote device.
pub struct RpcBuffer {
    common: BufferCommon,
    buft: Arc<RpcBufferType>,
    handle: u64,
    base: u64,
}

impl RpcBuffer {
    /// The server's handle of the buffer.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// The server's address of byte `offset`.
    pub fn addr(&self, offset: usize) -> u64 {
        self.base + offset as u64
    }

    /// The connection to the buffer's server.
    pub fn conn(&self) -> &Arc<Conn> {
        &self.buft.conn
    }

    /// A byte tensor covering `len` bytes at `offset`, the form every data
    /// command takes (the server checks it against the buffer).
    fn bytes_tensor(&self, offset: usize, len: usize) -> RpcTensor {
        let mut t = RpcTensor {
            ty: Type::I8.id(),
            buffer: self.handle,
            ne: [len as u32, 1, 1, 1],
            nb: [1, len as u32, len as u32, len as u32],
            data: self.addr(offset),
            ..RpcTensor::default()
        };
        t.set_name("rpc_bytes");
        t
    }

    fn set_chunk(&self, offset: usize, data: &[u8]) -> CoreResult<()> {
        let t = self.bytes_tensor(offset, data.len());
        let mut cache_flag = 0u8;
        if data.len() > HASH_THRESHOLD && self.usage() == BufferUsage::Weights {
            let mut body = Vec::with_capacity(RPC_TENSOR_SIZE + 16);
            t.encode(&mut body);
            body.extend_from_slice(&0u64.to_le_bytes());
            body.extend_from_slice(&proto::fnv_hash(data).to_le_bytes());
            if self.conn().call(Cmd::SetTensorHash, &body, Some(1))?[0] != 0 {
                return Ok(());
            }
            cache_flag = 1;
        }
        let mut body = Vec::with_capacity(RPC_TENSOR_SIZE + 9 + data.len());
        t.encode(&mut body);
        body.push(cache_flag);
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(data);
        self.conn().call(Cmd::SetTensor, &body, None)?;
        Ok(())
    }
}

/// Largest piece of one data command (sizes travel as u32 in `ne`).
const CHUNK: usize = 1 << 30;

impl Buffer for RpcBuffer {
    fn common(&self) -> &BufferCommon {
        &self.common
    }

    fn set_tensor(&self, offset: usize, data: &[u8]) -> CoreResult<()> {
        self.common.check_range("set_tensor", offset, data.len())?;
        for (i, c) in data.chunks(CHUNK).enumerate() {
            self.set_chunk(offset + i * CHUNK, c)?;
        }
        Ok(())
    }

    fn get_tensor(&self, offset: usize, out: &mut [u8]) -> CoreResult<()> {
        self.common.check_range("get_tensor", offset, out.len())?;
        for (i, c) in out.chunks_mut(CHUNK).enumerate() {
            let mut body = Vec::with_capacity(RPC_TENSOR_SIZE + 16);
            self.bytes_tensor(offset + i * CHUNK, c.len())
                .encode(&mut body);
            body.extend_from_slice(&0u64.to_le_bytes());
            body.extend_from_slice(&(c.len() as u64).to_le_bytes());
            let r = self.conn().call(Cmd::GetTensor, &body, Some(c.len()))?;
            c.copy_from_slice(&r);
        }
        Ok(())
    }

    fn memset_tensor(&self, offset: usize, value: u8, size: usize) -> CoreResult<()> {
        self.common.check_range("memset_tensor", offset, size)?;
        let mut done = 0;
        while done < size {
            let n = (size - done).min(CHUNK);
            let mut body = Vec::with_capacity(RPC_TENSOR_SIZE + 17);
            self.bytes_tensor(offset + done, n).encode(&mut body);
            body.extend_from_slice(&0u64.to_le_bytes());
            body.extend_from_slice(&(n as u64).to_le_bytes());
            body.push(value);
            self.conn().call(Cmd::MemsetTensor, &body, None)?;
            done += n;
        }
        Ok(())
    }

    fn clear(&self, value: u8) -> CoreResult<()> {
        let mut body = self.handle.to_le_bytes().to_vec();
        body.push(value);
        self.conn().call(Cmd::BufferClear, &body, None)?;
        Ok(())
    }

    fn cpy_tensor(&self, src: &Placement, dst_offset: usize, size: usize) -> CoreResult<bool> {
        let Some(s) = src.buffer.as_any().downcast_ref::<RpcBuffer>() else {
            return Ok(false);
        };
        if !Arc::ptr_eq(s.conn(), self.conn()) || size > u32::MAX as usize {
            return Ok(false);
        }
        s.common
            .check_range("cpy_tensor source", src.offset, size)?;
        self.common.check_range("cpy_tensor", dst_offset, size)?;
        let mut body = Vec::with_capacity(2 * RPC_TENSOR_SIZE);
        s.bytes_tensor(src.offset, size).encode(&mut body);
        self.bytes_tensor(dst_offset, size).encode(&mut body);
        Ok(self.conn().call(Cmd::CopyTensor, &body, Some(1))?[0] != 0)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for RpcBuffer {
    fn drop(&mut self) {
        // A dead server has freed it already; nothing to report.
        let _ = self
            .conn()
            .call(Cmd::FreeBuffer, &self.handle.to_le_bytes(), None);
    }
}

/// An execution stream on a remote device.
pub struct RpcBackend {
    dev: Arc<RpcDevice>,
    /// The last graph sent, with the server's buffer-free count then.
    last: Option<(Vec<u8>, u64)>,
}

impl Backend for RpcBackend {
    fn name(&self) -> &str {
        &self.dev.name
    }

    fn device(&self) -> Arc<dyn Device> {
        self.dev.clone()
    }

    fn graph_compute(&mut self, graph: &Graph, nodes: &[TensorId]) -> CoreResult<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        let conn = self.dev.conn.clone();
        let body = graph_encode::encode(graph, nodes, self.dev.index, &conn)?.encode();
        let frees = conn.frees();
        if self
            .last
            .as_ref()
            .is_some_and(|(b, f)| *b == body && *f == frees)
        {
            conn.call(Cmd::GraphRecompute, &self.dev.index.to_le_bytes(), None)?;
        } else {
            conn.call(Cmd::GraphCompute, &body, None)?;
            self.last = Some((body, frees));
        }
        Ok(())
    }
}
