// A user's own CNN: convolutions with batch norm, a residual block, global pooling, label
// smoothing, on-device augmentation and a one-cycle schedule. Usage: bn_cnn [DATA [LIMIT [EPOCHS]]]
#include <trident/trident.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  using namespace trident;
  DatasetLoadOptions limits;
  limits.train_limit = argc > 2 ? std::stoll(argv[2]) : 0;
  DatasetSplits data = load_dataset(argc > 1 ? argv[1] : default_data_directory(), limits);
  auto model = [] {
    Network net("bn_cnn");
    net.add("conv1", Conv2d(16, 3).padding(1).bias(false));
    net.add("bn1", BatchNorm2d());
    net.add("relu1", ReLU());
    net.add("block", basic_block(16, 32, 2));  // conv-BN-ReLU-conv-BN + 1x1 projection, ReLU
    net.add("pool", GlobalAvgPool2d());
    net.add("flatten", Flatten());
    net.add("fc", Linear(10));
    return net;
  };
  TrainOptions options;
  options.batch = 128;
  options.epochs = argc > 3 ? std::stoll(argv[3]) : 5;
  options.optimizer.momentum = 0.9f;
  options.schedule.kind = "onecycle";
  options.schedule.max_lr = 0.1f;
  options.label_smoothing = 0.1f;
  options.augment.crop_padding = 2;
  Trainer trainer(DeviceRegistry::global().selected_devices(), model, data, options);
  for (int64_t e = 0; e < options.epochs; ++e) {
    const EpochStats s = trainer.train_epoch();
    std::cout << "epoch " << s.epoch << " loss " << s.train_loss << " test accuracy "
              << trainer.evaluate().accuracy << "\n";
  }
  return trainer.evaluate().accuracy > 0.5 ? 0 : 1;  // a working run learns
}
