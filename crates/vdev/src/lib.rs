//! tarn-vdev (placeholder)
