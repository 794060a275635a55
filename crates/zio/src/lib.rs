//! tarn-zio (placeholder)
