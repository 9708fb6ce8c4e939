from django.db import models


class Order(models.Model):
    email = models.EmailField()
    placed_at = models.DateTimeField(auto_now_add=True)
    confirmation_sent_at = models.DateTimeField(null=True)
