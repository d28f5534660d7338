// The README's library example ("Using the library"), compiled against the installed package so
// that it stays true.
#include <trident/trident.h>
#include <iostream>

int main() {
  using namespace trident;
  DatasetSplits data = load_dataset("/usr/share/datasets/fashion-mnist");  // IDX dir or .npz
  auto model = [] {                       // input features / channels inferred at build
    Network net("small_resnet");
    net.add("conv1", Conv2d(32, 3).padding(1).bias(false));
    net.add("bn1", BatchNorm2d());
    net.add("relu", ReLU());
    net.add("layer1", basic_block(32, 64, 2));   // a Residual: conv-BN-ReLU-conv-BN + 1x1 shortcut
    net.add("pool", GlobalAvgPool2d());
    net.add("flatten", Flatten());
    net.add("fc", Linear(10));
    return net;                           // logits: cross-entropy
  };
  TrainOptions options;
  options.batch = 128;
  options.epochs = 5;
  options.optimizer.kind = "adamw";       // sgd (momentum, nesterov), adam, adamw
  options.optimizer.lr = 1e-3f;
  options.schedule.kind = "cosine";       // none, step, cosine, onecycle: PyTorch's formulas
  options.label_smoothing = 0.1f;
  options.augment.crop_padding = 2;       // random crop + flip, drawn on the device
  options.precision = Precision::bf16;    // fp32 (default), tf32, bf16, fp16
  Trainer trainer(DeviceRegistry::global().selected_devices(), model, data, options);
  for (int64_t e = 0; e < options.epochs; ++e) {
    EpochStats s = trainer.train_epoch();
    std::cout << "epoch " << s.epoch << " loss " << s.train_loss
              << " test accuracy " << trainer.evaluate().accuracy << "\n";
  }
  save_weights(trainer.network(), "small_resnet.safetensors");   // PyTorch's state-dict names

  Predictor predictor(model, DeviceRegistry::global().default_device(),
                      "small_resnet.safetensors");
  std::vector<uint8_t> image(28 * 28);   // one 28x28 gray image, normalised as in training
  Prediction p = predictor.predict(image.data(), 1, 3).front();   // top 3 classes
}
