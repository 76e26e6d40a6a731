"""Pure geometry and image operations: numpy and OpenCV only, no onnxruntime, no Ray."""
