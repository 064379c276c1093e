//! Weight quantization and dequantization (STUB: being written).
#![allow(unused_variables)]
use crate::error::Error;
use crate::types::GgmlType;

/// Quantizes `rows` x `cols` f32 values to `ty` (STUB).
pub fn quantize(ty: GgmlType, x: &[f32], rows: usize, cols: usize) -> Result<Vec<u8>, Error> {
    Err(Error::Unsupported("stub".into()))
}

/// Dequantizes (STUB).
pub fn dequantize(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Result<Vec<f32>, Error> {
    Err(Error::Unsupported("stub".into()))
}
