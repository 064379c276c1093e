//! Plain-path dot products (STUB: being written).
#![allow(unused_variables)]
use crate::activation::Bf16Bits;
use crate::blocks::*;
/// STUB
pub fn vec_dot_f32(w: &[f32], a: &[f32]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_f16(w: &[F16Bits], a: &[F16Bits]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_bf16(w: &[Bf16Bits], a: &[Bf16Bits]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q4_0_q8_0(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q4_1_q8_1(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q5_0_q8_0(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q5_1_q8_1(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q8_0_q8_0(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q8_1_q8_1(w: &[BlockQ8_1], a: &[BlockQ8_1]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q2_k_q8_k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q3_k_q8_k(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q4_k_q8_k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q5_k_q8_k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q6_k_q8_k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_q8_k_q8_k(w: &[BlockQ8K], a: &[BlockQ8K]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_iq4_nl_q8_0(w: &[BlockIq4Nl], a: &[BlockQ8_0]) -> f32 { 0.0 }
/// STUB
pub fn vec_dot_iq4_xs_q8_k(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 { 0.0 }
