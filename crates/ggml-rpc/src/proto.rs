//! The wire format of llama.cpp's RPC protocol 7.0.0: command numbers, the
//! packed little-endian message structs, the serialized tensor
//! (`rpc_tensor`) and the framing.
//!
//! A request is `| cmd: u8 | size: u64 | body: size bytes |`; a response,
//! for the commands that have one, is `| size: u64 | body |`. Bodies are
//! packed C structs (no padding), little-endian. Commands without a
//! response (FREE_BUFFER, BUFFER_CLEAR, SET_TENSOR, INIT_TENSOR,
//! GRAPH_COMPUTE, GRAPH_RECOMPUTE, MEMSET_TENSOR) are fire-and-forget: a
//! server that rejects one closes the connection.

use std::io::{Read, Write};

use crate::error::{Result, RpcError};

/// Protocol version spoken (major, minor, patch).
pub const PROTO_VERSION: (u8, u8, u8) = (7, 0, 0);
/// Bytes of transport capabilities in HELLO (all zero on plain TCP).
pub const CONN_CAPS_SIZE: usize = 24;
/// Uploads larger than this first try SET_TENSOR_HASH.
pub const HASH_THRESHOLD: usize = 10 * 1024 * 1024;
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: usize = 4;
/// ggml's GGML_TENSOR_FLAG_INPUT.
pub const FLAG_INPUT: i32 = 1;
/// ggml's GGML_TENSOR_FLAG_OUTPUT.
pub const FLAG_OUTPUT: i32 = 2;
/// ggml's GGML_TENSOR_FLAG_COMPUTE: set on every node of a graph that must
/// run; ggml's backends skip a node without it.
pub const FLAG_COMPUTE: i32 = 16;
/// ggml's GGML_MAX_SRC.
pub const MAX_SRC: usize = 10;
/// 32-bit words of op parameters (GGML_MAX_OP_PARAMS / 4).
pub const N_OP_PARAMS: usize = 16;
/// ggml's GGML_MAX_NAME.
pub const MAX_NAME: usize = 64;
/// Size of a serialized tensor.
pub const RPC_TENSOR_SIZE: usize =
    8 + 4 + 8 + 16 + 16 + 4 + 64 + 4 + 8 * MAX_SRC + 8 + 8 + 8 + 64 + 4;

/// RPC commands, numbered as in llama.cpp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Cmd {
    /// Allocates a buffer on a device.
    AllocBuffer = 0,
    /// Alignment of a device's buffer type.
    GetAlignment = 1,
    /// Largest buffer of a device.
    GetMaxSize = 2,
    /// Base address of a buffer.
    BufferGetBase = 3,
    /// Frees a buffer.
    FreeBuffer = 4,
    /// Fills a buffer with a byte.
    BufferClear = 5,
    /// Writes bytes into a tensor.
    SetTensor = 6,
    /// Writes a tensor from the server's cache, by hash.
    SetTensorHash = 7,
    /// Reads bytes of a tensor.
    GetTensor = 8,
    /// Copies a tensor to another on the same server.
    CopyTensor = 9,
    /// Computes a graph.
    GraphCompute = 10,
    /// Free and total memory of a device.
    GetDeviceMemory = 11,
    /// Lets the backend prepare a tensor (padding).
    InitTensor = 12,
    /// Bytes a tensor needs in a buffer.
    GetAllocSize = 13,
    /// Handshake: protocol version and transport capabilities.
    Hello = 14,
    /// Number of devices served.
    DeviceCount = 15,
    /// Computes the last graph again.
    GraphRecompute = 16,
    /// Fills part of a tensor with a byte.
    MemsetTensor = 17,
}

impl Cmd {
    /// The command for a byte, if any.
    pub fn from_u8(b: u8) -> Option<Cmd> {
        use Cmd::*;
        Some(match b {
            0 => AllocBuffer,
            1 => GetAlignment,
            2 => GetMaxSize,
            3 => BufferGetBase,
            4 => FreeBuffer,
            5 => BufferClear,
            6 => SetTensor,
            7 => SetTensorHash,
            8 => GetTensor,
            9 => CopyTensor,
            10 => GraphCompute,
            11 => GetDeviceMemory,
            12 => InitTensor,
            13 => GetAllocSize,
            14 => Hello,
            15 => DeviceCount,
            16 => GraphRecompute,
            17 => MemsetTensor,
            _ => return None,
        })
    }

    /// True when the server answers the command.
    pub fn has_response(self) -> bool {
        !matches!(
            self,
            Cmd::FreeBuffer
                | Cmd::BufferClear
                | Cmd::SetTensor
                | Cmd::InitTensor
                | Cmd::GraphCompute
                | Cmd::GraphRecompute
                | Cmd::MemsetTensor
        )
    }

    /// The fixed request size, for commands whose body is one struct.
    pub fn fixed_request_size(self) -> Option<usize> {
        Some(match self {
            Cmd::AllocBuffer => 4 + 8,
            Cmd::GetAlignment | Cmd::GetMaxSize | Cmd::GetDeviceMemory | Cmd::GraphRecompute => 4,
            Cmd::BufferGetBase | Cmd::FreeBuffer => 8,
            Cmd::BufferClear => 9,
            Cmd::SetTensorHash => RPC_TENSOR_SIZE + 16,
            Cmd::GetTensor => RPC_TENSOR_SIZE + 16,
            Cmd::CopyTensor => 2 * RPC_TENSOR_SIZE,
            Cmd::InitTensor => RPC_TENSOR_SIZE,
            Cmd::GetAllocSize => 4 + (1 + MAX_SRC) * RPC_TENSOR_SIZE,
            Cmd::Hello => CONN_CAPS_SIZE,
            Cmd::DeviceCount => 0,
            Cmd::MemsetTensor => RPC_TENSOR_SIZE + 17,
            Cmd::SetTensor | Cmd::GraphCompute => return None,
        })
    }
}

/// A tensor as it travels: ids are the sender's handles (0 = none),
/// `buffer` is a server buffer handle and `data` an address in the
/// server's address space for that buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcTensor {
    /// Sender's id of the tensor (0 = null).
    pub id: u64,
    /// ggml type number.
    pub ty: u32,
    /// Server buffer handle (0 = none).
    pub buffer: u64,
    /// Elements per dimension.
    pub ne: [u32; MAX_DIMS],
    /// Byte strides.
    pub nb: [u32; MAX_DIMS],
    /// ggml op number.
    pub op: u32,
    /// Op parameters, as ggml's op_params.
    pub op_params: [i32; N_OP_PARAMS],
    /// ggml tensor flags.
    pub flags: i32,
    /// Ids of the sources (0 = none).
    pub src: [u64; MAX_SRC],
    /// Id of the tensor whose memory a view shares.
    pub view_src: u64,
    /// Byte offset of a view in its view_src.
    pub view_offs: u64,
    /// Address of the data in the server's address space.
    pub data: u64,
    /// NUL-padded name.
    pub name: [u8; MAX_NAME],
    /// How many graph nodes use the tensor.
    pub use_count: i32,
}

impl Default for RpcTensor {
    fn default() -> RpcTensor {
        RpcTensor {
            id: 0,
            ty: 0,
            buffer: 0,
            ne: [0; MAX_DIMS],
            nb: [0; MAX_DIMS],
            op: 0,
            op_params: [0; N_OP_PARAMS],
            flags: 0,
            src: [0; MAX_SRC],
            view_src: 0,
            view_offs: 0,
            data: 0,
            name: [0; MAX_NAME],
            use_count: 0,
        }
    }
}

impl RpcTensor {
    /// The name up to its first NUL, lossily decoded.
    pub fn name_str(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    /// Sets the name, truncated to 63 bytes as ggml does.
    pub fn set_name(&mut self, name: &str) {
        self.name = [0; MAX_NAME];
        let b = name.as_bytes();
        let n = b.len().min(MAX_NAME - 1);
        self.name[..n].copy_from_slice(&b[..n]);
    }

    /// Appends the packed encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.ty.to_le_bytes());
        out.extend_from_slice(&self.buffer.to_le_bytes());
        self.ne
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        self.nb
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&self.op.to_le_bytes());
        self.op_params
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&self.flags.to_le_bytes());
        self.src
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&self.view_src.to_le_bytes());
        out.extend_from_slice(&self.view_offs.to_le_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&self.use_count.to_le_bytes());
    }

    /// Decodes one tensor from a reader.
    pub fn decode(r: &mut Reader<'_>) -> Result<RpcTensor> {
        let mut t = RpcTensor {
            id: r.u64()?,
            ty: r.u32()?,
            buffer: r.u64()?,
            ..RpcTensor::default()
        };
        for v in &mut t.ne {
            *v = r.u32()?;
        }
        for v in &mut t.nb {
            *v = r.u32()?;
        }
        t.op = r.u32()?;
        for v in &mut t.op_params {
            *v = r.i32()?;
        }
        t.flags = r.i32()?;
        for v in &mut t.src {
            *v = r.u64()?;
        }
        t.view_src = r.u64()?;
        t.view_offs = r.u64()?;
        t.data = r.u64()?;
        t.name.copy_from_slice(r.bytes(MAX_NAME)?);
        t.use_count = r.i32()?;
        Ok(t)
    }
}

/// A bounds-checked little-endian reader over a message body.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                RpcError::Malformed(format!(
                    "message of {} bytes ends before byte {} + {n}",
                    self.buf.len(),
                    self.pos
                ))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The rest of the message.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> Result<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A little-endian i32.
    pub fn i32(&mut self) -> Result<i32> {
        Ok(self.u32()? as i32)
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(RpcError::Malformed(format!(
                "{} trailing bytes in a message of {}",
                self.remaining(),
                self.buf.len()
            )));
        }
        Ok(())
    }
}

/// A decoded GRAPH_COMPUTE body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphMsg {
    /// Device index on the server.
    pub device: u32,
    /// Ids of the graph's nodes, in order.
    pub nodes: Vec<u64>,
    /// Every tensor the nodes reach.
    pub tensors: Vec<RpcTensor>,
}

impl GraphMsg {
    /// Encodes `| device u32 | n_nodes u32 | ids u64* | n_tensors u32 | tensors |`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(12 + 8 * self.nodes.len() + RPC_TENSOR_SIZE * self.tensors.len());
        out.extend_from_slice(&self.device.to_le_bytes());
        out.extend_from_slice(&(self.nodes.len() as u32).to_le_bytes());
        self.nodes
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&(self.tensors.len() as u32).to_le_bytes());
        self.tensors.iter().for_each(|t| t.encode(&mut out));
        out
    }

    /// Decodes a body, checking every count against the bytes present
    /// before reserving anything.
    pub fn decode(body: &[u8]) -> Result<GraphMsg> {
        let mut r = Reader::new(body);
        let device = r.u32()?;
        let n_nodes = r.u32()? as usize;
        if n_nodes.saturating_mul(8) > r.remaining() {
            return Err(RpcError::Malformed(format!(
                "graph claims {n_nodes} nodes in {} bytes",
                body.len()
            )));
        }
        let nodes = (0..n_nodes).map(|_| r.u64()).collect::<Result<Vec<_>>>()?;
        let n_tensors = r.u32()? as usize;
        if n_tensors.saturating_mul(RPC_TENSOR_SIZE) != r.remaining() {
            return Err(RpcError::Malformed(format!(
                "graph claims {n_tensors} tensors but {} bytes follow",
                r.remaining()
            )));
        }
        let tensors = (0..n_tensors)
            .map(|_| RpcTensor::decode(&mut r))
            .collect::<Result<Vec<_>>>()?;
        r.finish()?;
        Ok(GraphMsg {
            device,
            nodes,
            tensors,
        })
    }
}

/// Writes a request frame.
pub fn write_request(w: &mut impl Write, cmd: Cmd, body: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 9];
    head[0] = cmd as u8;
    head[1..].copy_from_slice(&(body.len() as u64).to_le_bytes());
    w.write_all(&head)?;
    w.write_all(body)?;
    w.flush()
}

/// Writes a response frame.
pub fn write_response(w: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    w.write_all(&(body.len() as u64).to_le_bytes())?;
    w.write_all(body)?;
    w.flush()
}

/// Reads a little-endian u64 length.
pub fn read_len(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Reads `len` bytes, growing the buffer as bytes arrive so that a length
/// that lies costs no more memory than the bytes actually sent.
pub fn read_body(r: &mut impl Read, len: u64) -> std::io::Result<Vec<u8>> {
    const CHUNK: u64 = 1 << 20;
    let mut out = Vec::with_capacity(len.min(CHUNK) as usize);
    let mut left = len;
    while left > 0 {
        let n = left.min(CHUNK) as usize;
        let start = out.len();
        out.resize(start + n, 0);
        r.read_exact(&mut out[start..])?;
        left -= n as u64;
    }
    Ok(out)
}

/// FNV-1a over `data`, the hash of the weight cache.
pub fn fnv_hash(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_size_matches_the_packed_struct() {
        // 8+4+8 + 4*4*2 + 4 + 64 + 4 + 80 + 8+8+8 + 64 + 4
        assert_eq!(RPC_TENSOR_SIZE, 296);
        let mut t = RpcTensor {
            id: 7,
            ty: 2,
            op: 29,
            ..RpcTensor::default()
        };
        t.set_name("blk.0.attn_q.weight");
        let mut out = Vec::new();
        t.encode(&mut out);
        assert_eq!(out.len(), RPC_TENSOR_SIZE);
        let back = RpcTensor::decode(&mut Reader::new(&out)).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.name_str(), "blk.0.attn_q.weight");
    }

    #[test]
    fn graph_counts_are_checked_against_the_bytes() {
        let mut body = Vec::new();
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(GraphMsg::decode(&body).is_err());
        let g = GraphMsg {
            device: 0,
            nodes: vec![1],
            tensors: vec![RpcTensor {
                id: 1,
                ..Default::default()
            }],
        };
        let mut enc = g.encode();
        assert_eq!(GraphMsg::decode(&enc).unwrap(), g);
        enc.push(0);
        assert!(GraphMsg::decode(&enc).is_err());
    }

    #[test]
    fn fnv_of_known_input() {
        assert_eq!(fnv_hash(b""), 0xcbf29ce484222325);
        assert_eq!(fnv_hash(b"a"), 0xaf63dc4c8601ec8c);
    }
}
