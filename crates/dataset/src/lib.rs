//! tarn-dataset (placeholder)
